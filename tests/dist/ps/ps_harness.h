// What the parameter server's tests share on top of tests/dist/equivalence.h: options for
// float64 chunks, the number of workers a placement leaves, the trainer's layout of dedicated
// servers (on the CPU, beside workers on the test device), and a driver that runs workers
// through the loop's calls while dedicated servers serve.
#pragma once

#include "dist/comm/mpi_communicator.h"
#include "dist/options.h"
#include "dist/placement.h"
#include "dist/ps/ps.h"

#include "equivalence.h"

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace ps_harness {

using namespace equivalence;

// chunk_mb for chunks of `numel` float64 elements.
inline double chunk_mb(int64_t numel) {
  return static_cast<double>(numel * 8) / (1024.0 * 1024.0);
}

inline dtrain::dist::PsOptions ps_options(const std::string& placement, int64_t servers,
                                          int64_t chunk_numel,
                                          const std::string& consistency = "bsp",
                                          int64_t staleness = 0) {
  dtrain::dist::PsOptions options;
  options.placement = placement;
  options.servers = servers;
  options.chunk_mb = chunk_mb(chunk_numel);
  options.consistency = consistency;
  options.staleness = staleness;
  return options;
}

// The p2p transport's links under test: DTRAIN_TEST_P2P_LINKS ("shared", "communicator"),
// as the shared-link variants in tests/CMakeLists.txt set it, or "auto".
inline dtrain::dist::PsOptions p2p_transport(dtrain::dist::PsOptions options) {
  const char* links = std::getenv("DTRAIN_TEST_P2P_LINKS");
  options.transport = "p2p";
  options.p2p_links = links ? links : "auto";
  return options;
}

inline int workers(const dtrain::dist::PsOptions& options) {
  return dtrain::dist::place_ps_ranks(options, world()->size()).num_device_ranks;
}

// Whether this rank is a dedicated server under `options`: on the CPU, whatever the test device.
inline bool host_only(const dtrain::dist::PsOptions& options) {
  return dtrain::dist::place_ps_ranks(options, world()->size()).host_only(world()->rank());
}

// The world over MPI, made once per process by every rank: a dedicated server's communicator.
inline std::shared_ptr<dtrain::dist::Communicator> cpu_world() {
  static std::shared_ptr<dtrain::dist::Communicator> communicator =
      dtrain::dist::make_mpi_world(60.0);
  return communicator;
}

// This rank's communicator as the trainer builds it for `options` (trainer/setup.cpp): every
// rank's world() when colocated; when dedicated, a worker's over the workers alone on the test
// device (NCCL on GPUs, which the servers have no part in) and a server's the CPU world.
// Collective over every rank.
inline std::shared_ptr<dtrain::dist::Communicator> placed_world(
    const dtrain::dist::PsOptions& options) {
  const std::shared_ptr<dtrain::dist::Communicator> cpu = cpu_world();
  if (options.placement != "dedicated") return world();
  if (host_only(options)) return cpu;
  return dtrain::dist::make_device_communicator(device(), 60.0, workers(options));
}

// A net from `seed` on this rank's device in that layout: the CPU on a dedicated server.
inline Net placed_net(const dtrain::dist::PsOptions& options, uint64_t seed = 0) {
  Net net = make_net(seed);
  if (host_only(options)) net->to(torch::kCPU);
  return net;
}

// Runs steps [from, to) on every worker of `strategy` (a server serves instead), then the
// end-of-training sync. `between`, if set, runs on each worker after each step.
inline void run(Net& net, dtrain::dist::PsStrategy& strategy, const Data& data, int64_t from,
                int64_t to, double lr, const std::function<void(int64_t)>& between = nullptr) {
  if (strategy.role() == dtrain::dist::Role::kServer) {
    strategy.serve();
    return;
  }
  for (int64_t step = from; step < to; ++step) {
    train(net, strategy, data, step, step + 1, lr, 1, strategy.data_group().rank);
    if (between) between(step);
  }
  strategy.finish();
}

// A net from seed 0 trained for kSteps by a colocated PsStrategy with `ps`, every rank a
// worker (the strategy is gone when it returns: its last sync is done).
inline Net train_colocated(const dtrain::dist::PsOptions& ps,
                           const dtrain::optim::OptimizerOptions& options, const Data& data) {
  Net net = make_net();
  dtrain::dist::PsStrategy strategy(ps, world(), 60.0);
  strategy.attach(*net, factory(options));
  run(net, strategy, data, 0, kSteps, options.lr);
  return net;
}

// One process for read.size(1) steps: step t's update is the average over ranks r of rank r's
// gradient at version v = read[r][t] (the parameters after that many updates), or with
// `predict` at w_v + (t - v)(w_v - w_{v-1}).
inline Net train_reference_at_versions(const Data& data,
                                      const dtrain::optim::OptimizerOptions& options,
                                      const torch::Tensor& read, bool predict = false) {
  Net net = make_net();
  Net reader = make_net();
  auto optimizer = dtrain::optim::make_optimizer(options, net->parameters());
  std::vector<std::vector<torch::Tensor>> versions;
  const auto snapshot = [&] {
    std::vector<torch::Tensor> values;
    for (const torch::Tensor& param : net->parameters()) values.push_back(param.detach().clone());
    versions.push_back(values);
  };
  snapshot();
  const int64_t ranks = read.size(0);
  for (int64_t step = 0; step < read.size(1); ++step) {
    auto params = net->parameters();
    for (auto& param : params) param.mutable_grad() = torch::zeros_like(param);
    for (int64_t r = 0; r < ranks; ++r) {
      const int64_t v = read[r][step].item<int64_t>();
      const auto& version = versions[static_cast<size_t>(v)];
      auto reader_params = reader->parameters();
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < version.size(); ++i) {
          reader_params[i].copy_(version[i]);
          if (predict && v > 0 && step > v) {
            const auto& before = versions[static_cast<size_t>(v - 1)];
            reader_params[i].add_(version[i] - before[i], static_cast<double>(step - v));
          }
        }
      }
      reader->zero_grad();
      torch::nn::functional::cross_entropy(
          reader->forward(data.x[step].narrow(0, r * kPerRank, kPerRank)),
          data.y[step].narrow(0, r * kPerRank, kPerRank))
          .backward();
      for (size_t i = 0; i < params.size(); ++i) {
        params[i].mutable_grad().add_(reader_params[i].grad() / static_cast<double>(ranks));
      }
    }
    optimizer->step();
    snapshot();
  }
  return net;
}

}  // namespace ps_harness
