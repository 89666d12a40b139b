// The equivalence harness every strategy's test uses (DESIGN.md: N ranks of a strategy must
// take exactly the steps one process takes on the N-times batch). A small float64 model, the
// global batches of every step (the same on every rank), the reference trained by one
// process on the whole global batch, and a driver that runs any Strategy through the
// training loop's call sequence on this rank's slice. Float64, so the only difference left
// is summation order: strategies are held to 1e-12. On the CPU over MPI, or on this rank's
// GPU over NCCL when DTRAIN_TEST_DEVICE=cuda (tests/dist/test_device.h).
#pragma once

#include "common/files.h"
#include "common/units.h"
#include "dist/comm/communicator.h"
#include "dist/strategy.h"
#include "optim/optimizer.h"
#include "optim/state_bytes.h"

#include "test_device.h"

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

namespace equivalence {

constexpr int64_t kIn = 6, kHidden = 10, kClasses = 3, kPerRank = 4, kSteps = 4;
constexpr double kTolerance = 1e-12;

// The world on the test device, made once per process.
inline std::shared_ptr<dtrain::dist::Communicator> world() { return device_world(); }
inline torch::Device device() { return world()->device(); }

struct NetOptions {
  bool with_unused = false;  // a layer that takes part in no forward
  bool with_norm = false;    // BatchNorm after the body: buffers to keep in sync
};

// head(tanh(middle(tanh(body(x))))). The head is registered first, so backward's gradient
// order differs from reversed registration order (DDP's first bucket guess). Its units
// (common/units.h), for ZeRO-3: unused (listed first: it never runs), body, norm, middle,
// head; without unit hooks they are plain calls.
struct NetImpl : dtrain::UnitModule {
  explicit NetImpl(NetOptions options = {}) {
    head = register_module("head", torch::nn::Linear(kHidden, kClasses));
    body = register_module("body", torch::nn::Linear(kIn, kHidden));
    middle = register_module("middle", torch::nn::Linear(kHidden, kHidden));
    if (options.with_unused) unused = register_module("unused", torch::nn::Linear(2, 2));
    if (options.with_norm) norm = register_module("norm", torch::nn::BatchNorm1d(kHidden));
  }
  std::vector<dtrain::Unit> units() override {
    std::vector<dtrain::Unit> units;
    if (unused) units.push_back({"unused.", unused.ptr().get()});
    units.push_back({"body.", body.ptr().get()});
    if (norm) units.push_back({"norm.", norm.ptr().get()});
    units.push_back({"middle.", middle.ptr().get()});
    units.push_back({"head.", head.ptr().get()});
    return units;
  }
  torch::Tensor forward(torch::Tensor x) {
    int64_t unit = unused ? 1 : 0;
    torch::Tensor h = run_unit(unit++, x, [this](const torch::Tensor& in) { return body(in); });
    if (norm) h = run_unit(unit++, h, [this](const torch::Tensor& in) { return norm(in); });
    h = run_unit(unit++, torch::tanh(h), [this](const torch::Tensor& in) { return middle(in); });
    return run_unit(unit, torch::tanh(h), [this](const torch::Tensor& in) { return head(in); });
  }
  torch::nn::Linear head{nullptr}, body{nullptr}, middle{nullptr}, unused{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
};
TORCH_MODULE(Net);

// Ranks may start from different weights (`seed`): attach() must broadcast rank 0's.
inline Net make_net(uint64_t seed = 0, NetOptions options = {}) {
  torch::manual_seed(seed);
  Net net(options);
  net->to(device(), torch::kFloat64);
  return net;
}

// Weight decay in two groups, LARS's and LAMB's trust ratios, LAMB's global clipping: every
// norm a sharded optimizer must get exactly right.
inline dtrain::optim::OptimizerOptions optimizer_options(const std::string& name) {
  dtrain::optim::OptimizerOptions options;
  options.name = name;
  options.lr = name == "adamw" || name == "lamb" ? 0.01 : 0.1;
  options.momentum = 0.9;
  options.weight_decay = 1e-2;
  options.decay_norm_and_bias = false;
  options.trust_coefficient = 0.02;
  if (name == "lamb") options.max_grad_norm = 0.5;
  return options;
}

inline dtrain::dist::OptimizerFactory factory(const dtrain::optim::OptimizerOptions& options) {
  return [options](const std::vector<torch::Tensor>& params) {
    return dtrain::optim::make_optimizer(options, params);
  };
}

struct Data {
  torch::Tensor x, y;  // [steps, world * kPerRank, ...]
};
inline Data make_data(int64_t world_size, int64_t steps = kSteps) {
  auto gen = at::detail::createCPUGenerator(1234);
  return {at::randn({steps, world_size * kPerRank, kIn}, gen, torch::kFloat64).to(device()),
          at::randint(kClasses, {steps, world_size * kPerRank}, gen, torch::kInt64).to(device())};
}

// One process on each step's whole global batch. `state_bytes`, if given, receives the bytes
// of its optimizer state.
inline Net train_reference(const Data& data, const dtrain::optim::OptimizerOptions& options,
                           NetOptions net_options = {}, int64_t* state_bytes = nullptr) {
  Net net = make_net(0, net_options);
  auto optimizer = dtrain::optim::make_optimizer(options, net->parameters());
  for (int64_t step = 0; step < kSteps; ++step) {
    optimizer->zero_grad();
    torch::nn::functional::cross_entropy(net->forward(data.x[step]), data.y[step]).backward();
    optimizer->step();
  }
  if (state_bytes) *state_bytes = dtrain::optim::state_bytes(*optimizer);
  return net;
}

// One process whose global batch changes at step 2, as a run resumed there on another number
// of ranks: the first `ranks_before` x kPerRank samples of each global batch before, the first
// `ranks_after` x kPerRank from step 2 on.
inline Net train_reference_resumed(const Data& data, const dtrain::optim::OptimizerOptions& options,
                                   int64_t ranks_before, int64_t ranks_after) {
  Net net = make_net();
  auto optimizer = dtrain::optim::make_optimizer(options, net->parameters());
  for (int64_t step = 0; step < kSteps; ++step) {
    const int64_t batch = (step < 2 ? ranks_before : ranks_after) * kPerRank;
    optimizer->zero_grad();
    torch::nn::functional::cross_entropy(net->forward(data.x[step].narrow(0, 0, batch)),
                                         data.y[step].narrow(0, 0, batch))
        .backward();
    optimizer->step();
  }
  return net;
}

// Steps [from, to) under `strategy`, as the trainer calls it, on slice `rank` of each global
// batch (this rank's in the world by default), in `micro` micro-steps of kPerRank / micro.
inline void train(Net& net, dtrain::dist::Strategy& strategy, const Data& data, int64_t from,
                  int64_t to, double lr, int64_t micro = 1, int rank = -1) {
  if (rank < 0) rank = world()->rank();
  const int64_t per_micro = kPerRank / micro;
  for (int64_t step = from; step < to; ++step) {
    strategy.before_forward(step);
    for (int64_t m = 0; m < micro; ++m) {
      const int64_t begin = rank * kPerRank + m * per_micro;
      strategy.before_backward(m + 1 == micro);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(
          net->forward(data.x[step].narrow(0, begin, per_micro)),
          data.y[step].narrow(0, begin, per_micro));
      (loss / static_cast<double>(micro)).backward();
      strategy.after_backward(m + 1 == micro);
    }
    strategy.step(lr);
  }
}

inline double max_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0.0;
  const auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  }
  return worst;
}

// Under stage 3 the model's parameters hold no memory between steps: they are compared
// through the strategy's consolidated state, by name.
inline double max_difference(const dtrain::dist::NamedTensors& state, torch::nn::Module& reference) {
  double worst = 0.0;
  const auto params = reference.named_parameters();
  for (const auto& [name, tensor] : state) {
    const torch::Tensor* other = params.find(name);
    if (other == nullptr) continue;  // a buffer
    worst = std::max(worst, (tensor - *other).abs().max().item<double>());
  }
  return worst;
}

// A new model holding the consolidated state's weights.
inline Net net_from(const dtrain::dist::NamedTensors& state) {
  Net net = make_net();
  torch::NoGradGuard no_grad;
  auto params = net->named_parameters();
  for (const auto& [name, tensor] : state) {
    if (torch::Tensor* param = params.find(name)) param->copy_(tensor);
  }
  return net;
}

// A new model holding `trained`'s current weights.
inline Net copy_of(Net& trained) {
  Net copy = make_net();
  torch::NoGradGuard no_grad;
  const auto from = trained->parameters(), to = copy->parameters();
  for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  return copy;
}

// An empty directory for `name`, made by rank 0 (the ranks share a filesystem); the caller
// orders later reads after it with a collective. Named per world size and device type (the
// same name on every rank, whichever GPU it has): CTest runs
// the np2, np3 and np4 variants (and the NCCL ones) of a file at the same time.
inline std::string fresh_directory(const std::string& name) {
  const std::string dir =
      name + "_np" + std::to_string(world()->size()) + "_" + (device().is_cuda() ? "cuda" : "cpu");
  if (world()->rank() == 0) {
    dtrain::remove_tree(dir);  // not std::filesystem::remove_all (common/files.h)
    std::filesystem::create_directories(dir);
  }
  return dir;
}

// The value of the stat `name`; fails the test when the strategy does not report it.
inline double stat(const dtrain::dist::Stats& stats, const std::string& name) {
  for (const dtrain::dist::Stat& s : stats) {
    if (s.name == name) return s.value;
  }
  throw std::runtime_error("no stat " + name);
}

// Writes `strategy`'s checkpoint into `dir` as the trainer does (trainer/checkpoint.h): every
// rank of `group` (the strategy's) its part, then rank 0 of `group` the rest. Every rank of
// `group` calls; the readers then wait for it on a barrier of theirs.
inline void write_checkpoint(dtrain::dist::Strategy& strategy, const std::string& dir,
                             dtrain::dist::Communicator& group) {
  strategy.prepare_checkpoint();
  group.barrier();  // rank 0 made `dir` (fresh_directory)
  strategy.save_partition(dir);
  group.barrier();  // blocks the host on NCCL too: every part is on disk
  if (group.rank() == 0) strategy.save(dir);
}

// The same over the world; on return every rank may read it.
inline void save_checkpoint(dtrain::dist::Strategy& strategy, const std::string& dir) {
  write_checkpoint(strategy, dir, *world());
  world()->barrier();
}

}  // namespace equivalence
