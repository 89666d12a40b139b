// The parameter server over its messages transport under dist.compression
// (dist/ps/push_codec.h), float64 on N ranks, with dedicated servers and colocated, BSP (with a
// hierarchy too) and async:
//   - every step, the update the servers applied is -lr x the average over the workers of
//     what each pushed (under a hierarchy, what each node's leader pushed for its node),
//     sent_w = g_w + e_w(before) - e_w(after) (its gradient, computed here on a copy of the
//     model, plus its residual before, minus its residual after): the servers
//     decode each worker's messages into what that worker's error feedback says it sent (plain
//     SGD, 1e-12 x its scale). The casts keep no residual: within eps x the sum of the workers'
//     largest magnitudes. Step 0 is a warm-up step of dense pushes;
//   - async and SSP with a codec train: every worker ends with the same parameters, moved
//     and finite, and the pushes are smaller than dense ones;
//   - codec state (residuals, DGC's velocity) resumes exactly: N/2 steps, a checkpoint, a new
//     strategy that loads it and N/2 more equal N straight;
//   - PowerSGD is refused in one line.
#include "dist/ps/ps.h"

#include "equivalence.h"
#include "ps/ps_harness.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using namespace dtrain::dist;
using namespace equivalence;
using namespace ps_harness;

namespace {

// Plain SGD: a step moves the parameters by -lr x the gradient it applies.
dtrain::optim::OptimizerOptions plain_sgd() {
  dtrain::optim::OptimizerOptions options;
  options.name = "sgd";
  options.lr = 0.1;
  options.momentum = 0.0;
  options.weight_decay = 0.0;
  return options;
}

// The messages transport: chunks of 7 elements split tensors and buckets.
PsOptions messages(const std::string& placement, const std::string& consistency,
                   int64_t staleness = 0) {
  PsOptions options = ps_options(placement, 1, 7, consistency, staleness);
  options.transport = "messages";
  return options;
}

CompressionOptions codec_options(const std::string& kind) {
  CompressionOptions options;
  options.kind = kind;
  options.ratio = 0.2;
  options.chunk = 8;
  return options;
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> copied;
  for (const torch::Tensor& tensor : tensors) copied.push_back(tensor.detach().clone());
  return copied;
}

// Worker `w`'s gradient at `net`'s parameters on its slice of step `step`'s batch.
std::vector<torch::Tensor> own_gradient(Net& net, const Data& data, int64_t step, int w) {
  Net copy = copy_of(net);
  copy->to(device());
  const int64_t begin = w * kPerRank;
  torch::nn::functional::cross_entropy(copy->forward(data.x[step].narrow(0, begin, kPerRank)),
                                       data.y[step].narrow(0, begin, kPerRank))
      .backward();
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& param : copy->parameters()) grads.push_back(param.grad().clone());
  return grads;
}

// The encoder's residual of every parameter (zeros where it keeps none).
std::vector<torch::Tensor> residuals_by_param(const PsStrategy& strategy,
                                              const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> by_param;
  for (const torch::Tensor& param : params) by_param.push_back(torch::zeros_like(param));
  const compression::CodecState state = strategy.push_encoder()->state();
  if (state.slots.empty()) return by_param;
  for (const auto& [param, residual] : state.slots[0]) {
    torch::Tensor& into = by_param[static_cast<size_t>(param)];
    into.copy_(residual.view_as(into));
  }
  return by_param;
}

double max_abs(const torch::Tensor& tensor) { return tensor.abs().max().item<double>(); }

}  // namespace

TEST_CASE("ps over messages refuses PowerSGD in one line", "[codec]") {
  CompressionOptions powersgd = codec_options("powersgd");
  CHECK_THROWS_WITH(PsStrategy(messages("colocated", "async"), world(), 60.0, powersgd),
                    Catch::Matchers::Contains("power iteration all-reduces its factors"));
}

TEST_CASE("ps over messages applies the average of the workers' decoded pushes", "[codec]") {
  const std::string kind = GENERATE("fp16", "bf16", "topk", "onebit");
  const std::string layout = GENERATE("colocated bsp", "colocated async", "dedicated bsp",
                                      "dedicated async", "colocated bsp hierarchical");
  INFO("codec " << kind << ", " << layout);
  const bool hierarchical = layout.find("hierarchical") != std::string::npos;
  if (hierarchical && device().is_cuda()) return;  // the hierarchy runs on CPU ranks only
  PsOptions ps = messages(layout.substr(0, layout.find(' ')),
                          layout.find("async") != std::string::npos ? "async" : "bsp");
  // A node's leader pushes the node's sum, encoded, with a residual of its own; the other
  // workers keep none, so the sum over the workers below is the sum over the leaders.
  ps.hierarchical = hierarchical;
  CompressionOptions compression = codec_options(kind);
  compression.warmup_steps = 1;
  const auto optimizer = plain_sgd();
  const std::shared_ptr<Communicator> comm = placed_world(ps);
  Net net = placed_net(ps);
  PsStrategy strategy(ps, comm, 60.0, compression);
  strategy.attach(*net, factory(optimizer));
  if (strategy.role() == Role::kServer) {
    strategy.serve();
    return;
  }
  const int w = strategy.data_group().rank;
  const double n = workers(ps);
  const Data data = make_data(workers(ps));
  const std::vector<torch::Tensor> params = net->parameters();
  for (int64_t step = 0; step < kSteps; ++step) {
    INFO("step " << step);
    strategy.before_eval();  // every update so far is in every worker's model
    const std::vector<torch::Tensor> before = clones(params);
    const std::vector<torch::Tensor> grads = own_gradient(net, data, step, w);
    const std::vector<torch::Tensor> residual_before = residuals_by_param(strategy, params);
    train(net, strategy, data, step, step + 1, optimizer.lr, 1, w);
    strategy.before_eval();
    const std::vector<torch::Tensor> residual_after = residuals_by_param(strategy, params);
    for (size_t p = 0; p < params.size(); ++p) {
      INFO("parameter " << p);
      torch::Tensor sent = grads[p] + residual_before[p] - residual_after[p];
      comm->all_reduce(sent, ReduceOp::kSum)->wait();
      const torch::Tensor applied = (before[p] - params[p].detach()) / optimizer.lr;
      const bool cast = (kind == "fp16" || kind == "bf16") && step > 0;
      torch::Tensor magnitude = grads[p].abs().max().reshape({1});
      comm->all_reduce(magnitude, ReduceOp::kSum)->wait();
      const double eps = !cast ? 1e-12 : kind == "fp16" ? 0x1p-10 : 0x1p-7;
      CHECK(max_abs(applied - sent / n) <= eps * std::max(1.0, magnitude.item<double>()));
    }
  }
  // Under a hierarchy only the leaders push (one node here: worker 0 leads it).
  if (!hierarchical || w == 0) {
    const Stats stats = strategy.stats();
    CHECK(stat(stats, "comm/compression_ratio") > 1.0);
    if (kind == "topk" || kind == "onebit") CHECK(stat(stats, "comm/residual_norm") > 0.0);
  }
  strategy.finish();
}

TEST_CASE("ps over messages with a codec trains under async and SSP", "[codec]") {
  const std::string kind = GENERATE("fp16", "bf16", "topk", "onebit");
  const std::string layout = GENERATE("dedicated async", "colocated async", "colocated ssp");
  INFO("codec " << kind << ", " << layout);
  const bool dedicated = layout.rfind("dedicated", 0) == 0;
  const bool ssp = layout.find("ssp") != std::string::npos;
  const PsOptions ps = messages(dedicated ? "dedicated" : "colocated", ssp ? "ssp" : "async",
                                ssp ? 2 : 0);
  CompressionOptions compression = codec_options(kind);
  compression.momentum = kind == "topk" ? 0.9 : 0.0;  // DGC's momentum correction
  const auto optimizer = kind == "topk" ? plain_sgd() : optimizer_options("sgd");
  const std::shared_ptr<Communicator> comm = placed_world(ps);
  Net net = placed_net(ps);
  PsStrategy strategy(ps, comm, 60.0, compression);
  strategy.attach(*net, factory(optimizer));
  if (strategy.role() == Role::kServer) {
    strategy.serve();
    return;
  }
  const int w = strategy.data_group().rank;
  const Data data = make_data(workers(ps));
  const std::vector<torch::Tensor> initial = clones(net->parameters());
  for (int64_t step = 0; step < kSteps; ++step) {
    train(net, strategy, data, step, step + 1, optimizer.lr, 1, w);
    if (w == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a straggler
  }
  CHECK(stat(strategy.stats(), "comm/compression_ratio") > 1.0);
  if (ssp) CHECK(stat(strategy.stats(), "ps/staleness_max") <= 2);
  strategy.finish();
  // Every worker holds the same, moved, finite parameters: the servers'.
  const std::vector<torch::Tensor> params = net->parameters();
  double moved = 0.0;
  for (size_t p = 0; p < params.size(); ++p) {
    REQUIRE(torch::isfinite(params[p]).all().item<bool>());
    moved = std::max(moved, max_abs(params[p] - initial[p]));
    torch::Tensor on_first = params[p].detach().clone();
    comm->broadcast(on_first, 0)->wait();
    CHECK(max_abs(on_first - params[p]) == 0.0);
  }
  CHECK(moved > 0.0);
}

namespace {

// Steps [from, to) of `net` under a new strategy: with `load_from`, from that checkpoint; with
// `save_to`, a checkpoint after them. Async workers meet after each step, so that each step
// reads every update of the steps before (a run that repeats bit for bit).
void run_part(Net& net, const PsOptions& ps, const CompressionOptions& compression,
              const dtrain::optim::OptimizerOptions& optimizer, const Data& data, int64_t from,
              int64_t to, const std::string& load_from, const std::string& save_to) {
  PsStrategy strategy(ps, placed_world(ps), 60.0, compression);
  strategy.attach(*net, factory(optimizer));
  if (strategy.role() == Role::kServer) {
    strategy.serve();
    world()->barrier();
    return;
  }
  if (!load_from.empty()) strategy.load(load_from);
  for (int64_t step = from; step < to; ++step) {
    train(net, strategy, data, step, step + 1, optimizer.lr, 1, strategy.data_group().rank);
    strategy.before_eval();
  }
  if (!save_to.empty()) {
    strategy.prepare_checkpoint();
    if (world()->rank() == 0) strategy.save(save_to);
    if (compression.has_residuals()) CHECK(stat(strategy.stats(), "comm/residual_norm") > 0);
  }
  strategy.finish();
  world()->barrier();
}

}  // namespace

TEST_CASE("ps over messages resumes its codec state exactly", "[codec]") {
  const std::string kind = GENERATE("topk", "onebit", "fp16");
  const std::string placement = GENERATE("dedicated", "colocated");
  INFO("codec " << kind << ", " << placement);
  // Dedicated servers under bsp, colocated ones under async.
  const PsOptions ps = messages(placement, placement == "dedicated" ? "bsp" : "async");
  CompressionOptions compression = codec_options(kind);
  compression.warmup_steps = 1;
  compression.momentum = kind == "topk" ? 0.9 : 0.0;  // its velocity is state too
  // Plain SGD: async applies each push as a step of its own, in arrival order, which a
  // momentum buffer would remember.
  const auto optimizer = plain_sgd();
  const Data data = make_data(workers(ps));
  const std::string dir = fresh_directory("push_codec_resume_" + kind + "_" + placement);

  Net straight = placed_net(ps);
  run_part(straight, ps, compression, optimizer, data, 0, kSteps, "", "");
  Net first = placed_net(ps);
  run_part(first, ps, compression, optimizer, data, 0, kSteps / 2, "", dir);
  Net resumed = copy_of(first);  // rank 0's weights, given to every rank by attach()
  resumed->to(host_only(ps) ? torch::Device(torch::kCPU) : device());
  run_part(resumed, ps, compression, optimizer, data, kSteps / 2, kSteps, dir, "");
  if (!host_only(ps)) CHECK(max_difference(*resumed, *straight) < kTolerance);
}
