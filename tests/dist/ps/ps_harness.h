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

#include <functional>
#include <string>

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

}  // namespace ps_harness
