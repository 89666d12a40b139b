// The parameter server over collectives under dist.compression, float64 on N ranks:
//   - BSP, every step: the update the servers apply is the average of what the workers sent,
//     sent_r = g_r + e_r(before) - e_r(after) (this worker's gradient, computed here on a copy
//     of the model, plus its residual before, minus its residual after): the decoded average
//     is the average of the workers' decoded messages and error feedback holds per worker over
//     the whole model, with and without gradient accumulation (plain SGD, so the update is
//     -lr x that average: 1e-12 x its scale). The casts keep no residual and round each
//     partial sum: within eps x the sum of the workers' largest magnitudes. Step 0 is a
//     warm-up step: the plain average of the gradients;
//   - SSP(k) with a codec (exact and newest reads) keeps its bound while a worker is slowed,
//     and trains: every worker ends with the same parameters, moved and finite;
//   - codec state resumes exactly on the same ranks.
#include "dist/compression/codec.h"
#include "dist/ps/collective.h"

#include "codec_test_helpers.h"
#include "equivalence.h"
#include "ps/ps_harness.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using namespace dtrain::dist;
using namespace equivalence;
using ps_harness::ps_options;
using codec_test::codec_options;

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

PsOptions collectives(const std::string& consistency, int64_t staleness) {
  PsOptions options = ps_options("colocated", 1, 7, consistency, staleness);
  options.transport = "collectives";
  options.ssp_reads = "exact";
  return options;
}

struct Trained {
  Net net;
  std::unique_ptr<PsCollectiveStrategy> strategy;  // destroyed first: its hooks point into it
};

Trained start(const PsOptions& ps, const CompressionOptions& compression, Net net,
              const dtrain::optim::OptimizerOptions& optimizer) {
  auto strategy = std::make_unique<PsCollectiveStrategy>(ps, world(), compression);
  strategy->attach(*net, factory(optimizer));
  return {net, std::move(strategy)};
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> copied;
  for (const torch::Tensor& tensor : tensors) copied.push_back(tensor.detach().clone());
  return copied;
}

// This rank's gradient at `net`'s parameters on its slice of step `step`'s batch, by parameter.
std::vector<torch::Tensor> own_gradient(Net& net, const Data& data, int64_t step) {
  Net copy = copy_of(net);
  const int64_t begin = world()->rank() * kPerRank;
  torch::nn::functional::cross_entropy(copy->forward(data.x[step].narrow(0, begin, kPerRank)),
                                       data.y[step].narrow(0, begin, kPerRank))
      .backward();
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& param : copy->parameters()) grads.push_back(param.grad().clone());
  return grads;
}

// The codec's residual of every parameter (zeros where it keeps none).
std::vector<torch::Tensor> residuals_by_param(const PsCollectiveStrategy& strategy,
                                              const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> by_param;
  for (const torch::Tensor& param : params) by_param.push_back(torch::zeros_like(param));
  // By parameter, as a checkpoint holds them: a bucket may keep none (PowerSGD's of tensors
  // sent as they are).
  const dtrain::dist::compression::CodecState state = strategy.codec()->state();
  if (state.slots.empty()) return by_param;
  for (const auto& [param, residual] : state.slots[0]) {
    torch::Tensor& into = by_param[static_cast<size_t>(param)];
    into.copy_(residual.view_as(into));
  }
  return by_param;
}

double max_abs(const torch::Tensor& tensor) { return tensor.abs().max().item<double>(); }

}  // namespace

TEST_CASE("ps over collectives applies the average of the workers' decoded messages",
          "[codec]") {
  const std::string kind = GENERATE("fp16", "bf16", "topk", "powersgd", "onebit");
  const int64_t micro = GENERATE(1, 2);  // gradient accumulation: one push per step
  INFO("codec " << kind << ", " << micro << " micro-step(s)");
  CompressionOptions compression = codec_options(kind);
  compression.warmup_steps = 1;
  const auto optimizer = plain_sgd();
  const Data data = make_data(world()->size());
  Trained run = start(collectives("bsp", 0), compression, make_net(), optimizer);
  const std::vector<torch::Tensor> params = run.net->parameters();
  const double n = world()->size();
  for (int64_t step = 0; step < kSteps; ++step) {
    INFO("step " << step);
    run.strategy->before_forward(step);  // bsp: the model holds every update so far
    const std::vector<torch::Tensor> before = clones(params);
    const std::vector<torch::Tensor> grads = own_gradient(run.net, data, step);
    const std::vector<torch::Tensor> residual_before = residuals_by_param(*run.strategy, params);
    train(run.net, *run.strategy, data, step, step + 1, optimizer.lr, micro);
    run.strategy->before_forward(step + 1);
    const std::vector<torch::Tensor> residual_after = residuals_by_param(*run.strategy, params);
    for (size_t p = 0; p < params.size(); ++p) {
      INFO("parameter " << p);
      torch::Tensor sent = grads[p] + residual_before[p] - residual_after[p];
      world()->all_reduce(sent, ReduceOp::kSum)->wait();
      const torch::Tensor applied = (before[p] - params[p].detach()) / optimizer.lr;
      const bool cast = (kind == "fp16" || kind == "bf16") && step > 0;
      torch::Tensor magnitude = grads[p].abs().max().reshape({1});
      world()->all_reduce(magnitude, ReduceOp::kSum)->wait();
      const double eps = !cast ? 1e-12 : kind == "fp16" ? 0x1p-10 : 0x1p-7;
      CHECK(max_abs(applied - sent / n) <= eps * std::max(1.0, magnitude.item<double>()));
    }
  }
  if (kind == "fp16" || kind == "bf16") {
    // float64 reduced onto the servers as 2-byte elements.
    CHECK(stat(run.strategy->stats(), "comm/compression_ratio") == 4.0);
  } else {
    CHECK(stat(run.strategy->stats(), "comm/residual_norm") > 0);
  }
}

TEST_CASE("ps over collectives with a codec keeps SSP's bound and trains", "[codec]") {
  const std::string kind = GENERATE("fp16", "topk", "powersgd", "onebit");
  const std::string reads = GENERATE("exact", "newest");
  const int64_t k = 2;
  INFO("codec " << kind << ", " << reads << " reads");
  const auto optimizer = optimizer_options("sgd");
  const Data data = make_data(world()->size());
  PsOptions ps = collectives("ssp", k);
  ps.ssp_reads = reads;
  Trained run = start(ps, codec_options(kind), make_net(), optimizer);
  const std::vector<torch::Tensor> initial = clones(run.net->parameters());
  for (int64_t step = 0; step < kSteps; ++step) {
    train(run.net, *run.strategy, data, step, step + 1, optimizer.lr);
    if (reads == "exact") {  // always k old once it can be
      CHECK(run.strategy->last_staleness() == std::min(step, k));
    } else {
      CHECK(run.strategy->last_staleness() <= k);
    }
    if (world()->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(stat(run.strategy->stats(), "ps/staleness_max") <= k);
  run.strategy->finish();
  // Every rank holds the same, moved, finite parameters.
  const std::vector<torch::Tensor> params = run.net->parameters();
  double moved = 0.0;
  for (size_t p = 0; p < params.size(); ++p) {
    REQUIRE(torch::isfinite(params[p]).all().item<bool>());
    moved = std::max(moved, max_abs(params[p] - initial[p]));
    torch::Tensor on_zero = params[p].detach().clone();
    world()->broadcast(on_zero, 0)->wait();
    CHECK(max_abs(on_zero - params[p]) == 0.0);
  }
  CHECK(moved > 0.0);
}

TEST_CASE("ps over collectives resumes its codec state exactly on the same ranks", "[codec]") {
  const std::string kind = GENERATE("topk", "powersgd", "onebit");
  INFO("codec " << kind);
  CompressionOptions compression = codec_options(kind);
  compression.warmup_steps = 1;
  const auto optimizer = optimizer_options("sgd");
  const PsOptions ps = collectives("bsp", 0);
  const Data data = make_data(world()->size());
  Trained straight = start(ps, compression, make_net(), optimizer);
  train(straight.net, *straight.strategy, data, 0, kSteps, optimizer.lr);
  straight.strategy->finish();

  Trained first = start(ps, compression, make_net(), optimizer);
  train(first.net, *first.strategy, data, 0, kSteps / 2, optimizer.lr);
  const std::string dir = fresh_directory("ps_codec_resume_" + kind);
  save_checkpoint(*first.strategy, dir);
  CHECK(stat(first.strategy->stats(), "comm/residual_norm") > 0);
  Trained resumed = start(ps, compression, copy_of(first.net), optimizer);
  resumed.strategy->load(dir);
  train(resumed.net, *resumed.strategy, data, kSteps / 2, kSteps, optimizer.lr);
  resumed.strategy->finish();
  CHECK(max_difference(*resumed.net, *straight.net) < kTolerance);
}
