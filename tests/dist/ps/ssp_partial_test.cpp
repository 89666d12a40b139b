// SSP with partial reads (dist.ps.ssp_reads = "partial"): the servers send rounds in
// progress, stepped with the pushes in so far; over the messages transport once all workers
// but one have pushed, over p2p at every push. Held here to: the shard's preview is SGD's
// step to 1e-12 and changes nothing; every read a worker makes at step t is a whole version v
// in [t - k, t] or such a round v (round t too, which a straggler reads before it pushes its
// own share), computed from the pushes with torch's own SGD (1e-12); the rounds applied stay
// the average of every push; a slowed worker makes the others read its rounds in progress;
// SSP(0) stays BSP bit for bit.
#include "dist/ps/peer.h"
#include "dist/ps/piece_state.h"
#include "dist/ps/plan.h"
#include "dist/ps/ps.h"
#include "dist/ps/shard.h"

#include "ps/ps_harness.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <type_traits>

using dtrain::dist::PsOptions;
using dtrain::dist::PsPeerStrategy;
using dtrain::dist::PsShard;
using dtrain::dist::PsStrategy;
using namespace equivalence;
using namespace ps_harness;

namespace {

torch::Tensor flat(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& tensor : tensors) parts.push_back(tensor.detach().reshape(-1));
  return torch::cat(parts);
}

void unflatten(const torch::Tensor& values, std::vector<torch::Tensor>& into) {
  torch::NoGradGuard no_grad;
  int64_t at = 0;
  for (torch::Tensor& tensor : into) {
    tensor.copy_(values.narrow(0, at, tensor.numel()).view(tensor.sizes()));
    at += tensor.numel();
  }
}

std::vector<torch::Tensor> grads_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& param : params) grads.push_back(param.grad());
  return grads;
}

PsOptions partial_options(int64_t staleness) {
  PsOptions ps = ps_options("colocated", 1, 1000, "ssp", staleness);  // one chunk
  ps.ssp_reads = "partial";
  ps.transport = "messages";
  return ps;
}

PsOptions p2p_options(const std::string& consistency, int64_t staleness, int64_t chunk = 1000) {
  PsOptions ps = ps_options("colocated", 1, chunk, consistency, staleness);
  ps.ssp_reads = "partial";
  return p2p_transport(ps);
}

// Longer than kSteps: a worker ahead reads a round in progress once it waits on the slowed
// rank every step (its wait for a preview is a share of its last step), from about step 3 at
// k = 1 and step 5 at k = 2; in 4 steps, on a loaded machine, none might have.
constexpr int64_t kPartialSteps = 8;

// Trains with `strategy` (partial reads at staleness k, rank 1 slowed) and checks every read
// against the rounds one process applies: a whole round, or one with some workers' pushes.
// `fewest`: the fewest pushes a round in progress is sent with; `fill_with_mean`: whether it
// takes the mean of those in for the others (dist.ps.preview_fill), or zero.
// `net` from make_net(), made before `strategy`, which holds hooks in it until it goes.
// Returns whether any worker read a round in progress.
template <class Strategy>
bool check_partial_reads(Net& net, Strategy& strategy, int64_t k, int fewest,
                         bool fill_with_mean) {
  const auto options = optimizer_options("sgd");
  const int n = world()->size();
  const int rank = world()->rank();
  const Data data = make_data(n, kPartialSteps);
  strategy.attach(*net, factory(options));
  std::vector<torch::Tensor> params = net->parameters();
  std::vector<torch::Tensor> reads, pushes, reports;  // p2p: ps/reads_ahead, ps/shares_missing
  double partial_steps = 0.0;
  for (int64_t step = 0; step < kPartialSteps; ++step) {
    strategy.before_forward(step);
    reads.push_back(flat(params).clone());
    strategy.before_backward(true);
    torch::nn::functional::cross_entropy(net->forward(data.x[step].narrow(0, rank * kPerRank,
                                                                          kPerRank)),
                                         data.y[step].narrow(0, rank * kPerRank, kPerRank))
        .backward();
    strategy.after_backward(true);
    pushes.push_back(flat(grads_of(params)).clone());
    strategy.step(options.lr);
    CHECK(strategy.last_staleness() <= k);
    if constexpr (std::is_same_v<Strategy, PsPeerStrategy>) {
      reports.push_back(torch::tensor({strategy.last_reads_ahead(), strategy.last_shares_missing()},
                                    pushes.back().options()));
    }
    partial_steps += strategy.last_partial_reads() > 0.0 ? 1.0 : 0.0;
    // The others run ahead, into its rounds in progress: by more than a step of theirs on a
    // loaded machine too (CI runs other ranks beside these).
    if (rank == 1) strategy.pause(0.25);
  }
  strategy.finish();

  // Every rank's reads and pushes, [rank][step][element].
  const auto gather = [&](const std::vector<torch::Tensor>& mine) {
    torch::Tensor local = torch::stack(mine).contiguous();
    torch::Tensor all = torch::empty({n * local.numel()}, local.options());
    world()->all_gather(local.reshape(-1), all)->wait();
    return all.view({n, kPartialSteps, -1});
  };
  const torch::Tensor read = gather(reads);
  const torch::Tensor pushed = gather(pushes);
  const torch::Tensor reported = reports.empty() ? torch::Tensor() : gather(reports);
  torch::Tensor seen = torch::tensor({partial_steps}, torch::kFloat64).to(device());
  world()->all_reduce(seen, dtrain::dist::ReduceOp::kSum)->wait();

  // One process applies the rounds: the average of every push, whatever was read.
  Net reference = make_net();
  std::vector<torch::Tensor> ref_params = reference->parameters();
  auto optimizer = dtrain::optim::make_optimizer(options, ref_params);
  std::vector<torch::Tensor> versions;                  // flat, after v rounds
  std::vector<std::vector<torch::Tensor>> buffers;      // momentum buffers after v rounds
  for (int64_t step = 0; step <= kPartialSteps; ++step) {
    versions.push_back(flat(ref_params).clone());
    std::vector<torch::Tensor> these;
    for (const torch::Tensor& param : ref_params) {
      const auto* state = static_cast<const torch::optim::SGDParamState*>(
          dtrain::dist::find_state(*optimizer, param));
      these.push_back(state ? state->momentum_buffer().clone() : torch::Tensor());
    }
    buffers.push_back(these);
    if (step == kPartialSteps) break;
    for (size_t i = 0; i < ref_params.size(); ++i) ref_params[i].mutable_grad() = torch::Tensor();
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& param : ref_params) grads.push_back(torch::zeros_like(param));
    unflatten(pushed.select(1, step).mean(0), grads);
    for (size_t i = 0; i < ref_params.size(); ++i) ref_params[i].mutable_grad() = grads[i];
    optimizer->step();
  }
  CHECK((flat(params) - versions.back()).abs().max().item<double>() < kTolerance);

  // Round v stepped with the pushes of the workers in mask `in`, by torch's SGD on a copy.
  const auto partial_round = [&](int64_t v, int in) {
    Net copy = make_net();
    std::vector<torch::Tensor> copy_params = copy->parameters();
    unflatten(versions[static_cast<size_t>(v)], copy_params);
    auto stepper = dtrain::optim::make_optimizer(options, copy_params);
    for (size_t i = 0; i < copy_params.size(); ++i) {
      const torch::Tensor& buffer = buffers[static_cast<size_t>(v)][i];
      if (!buffer.defined()) continue;
      auto state = std::make_unique<torch::optim::SGDParamState>();
      state->momentum_buffer(buffer.clone());
      dtrain::dist::put_state(*stepper, copy_params[i], std::move(state));
    }
    torch::Tensor sum = torch::zeros_like(versions.front());
    for (int r = 0; r < n; ++r) {
      if (in & (1 << r)) sum += pushed[r][v];
    }
    const int count = __builtin_popcount(static_cast<unsigned>(in));
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& param : copy_params) grads.push_back(torch::zeros_like(param));
    unflatten(sum / static_cast<double>(fill_with_mean ? count : n), grads);
    for (size_t i = 0; i < copy_params.size(); ++i) copy_params[i].mutable_grad() = grads[i];
    stepper->step();
    return flat(copy_params);
  };
  for (int r = 0; r < n; ++r) {
    for (int64_t t = 0; t < kPartialSteps; ++t) {
      double closest = std::numeric_limits<double>::infinity();
      int64_t pushes_read = 0;  // of the closest: n per whole round, and those of a partial one
      const auto consider = [&](const torch::Tensor& candidate, int64_t holds) {
        const double difference = (read[r][t] - candidate).abs().max().item<double>();
        if (difference < closest) {
          closest = difference;
          pushes_read = holds;
        }
      };
      for (int64_t v = std::max<int64_t>(0, t - k); v <= t; ++v) {
        consider(versions[static_cast<size_t>(v)], v * n);
        // Round t too: a straggler reads the others' pushes of its own step before it pushes.
        for (int in = 1; in + 1 < (1 << n) && v < kPartialSteps; ++in) {
          const int count = __builtin_popcount(static_cast<unsigned>(in));
          if (count < fewest) continue;
          consider(partial_round(v, in), v * n + count);
        }
      }
      INFO("worker " << r << ", step " << t);
      CHECK(closest < kTolerance);
      // One chunk, so one server: a read ahead is one of round t, holding pushes of step t;
      // the pushes reported missing are at least those the read lacked (a preview sent under
      // several numbers at once counts as the first).
      if (reported.defined()) {
        CHECK(reported[r][t][0].item<double>() == (pushes_read > t * n ? 1.0 : 0.0));
        CHECK(reported[r][t][1].item<double>() >= static_cast<double>(t * n - pushes_read));
        CHECK(reported[r][t][1].item<double>() <= static_cast<double>((k + 1) * n));
      }
    }
  }
  world()->barrier();
  return seen.item<double>() >= 1.0;
}

// Runs `attempt` (a fresh net and strategy through check_partial_reads) until some read was of
// a round in progress, 3 times at most. On a loaded machine the slowed rank may not fall far
// enough behind in kPartialSteps for any read to be one; such a run checks only whole rounds.
template <class Attempt>
void expect_partial_reads(Attempt attempt) {
  bool seen = false;
  for (int tries = 0; tries < 3 && !seen; ++tries) seen = attempt();
  // A lone worker's rounds are whole once it pushes: none is ever in progress (one GPU).
  if (world()->size() > 1) CHECK(seen);
}

}  // namespace

TEST_CASE("ps shard: a preview is the step SGD would take, and changes nothing", "[dist][ps]") {
  const bool nesterov = GENERATE(false, true);
  const double momentum = GENERATE(0.0, 0.9);
  if (nesterov && momentum == 0.0) return;
  INFO("momentum " << momentum << (nesterov ? ", nesterov" : ""));
  auto options = optimizer_options("sgd");
  options.momentum = momentum;
  options.nesterov = nesterov;
  Net net = make_net();
  const std::vector<torch::Tensor> params = net->parameters();
  std::vector<int64_t> numels;
  for (const torch::Tensor& param : params) numels.push_back(param.numel());
  // Chunks of 50 elements split tensors; the biases take no decay (their own group).
  const auto plan = dtrain::dist::make_ps_plan(numels, 1, 50, false);
  const auto no_sum = [](torch::Tensor values) { return values; };
  PsShard previewed(plan, 0, params, device(), factory(options), no_sum, false);
  PsShard plain(plan, 0, params, device(), factory(options), no_sum, false);
  auto gen = at::detail::createCPUGenerator(7);
  for (int step = 0; step < 3; ++step) {  // the first step makes the momentum buffers
    const torch::Tensor grads =
        at::randn({previewed.numel()}, gen, torch::kFloat64).to(device());
    previewed.grads().copy_(grads);
    plain.grads().copy_(grads);
    const torch::Tensor preview = previewed.preview(options.lr);
    CHECK(previewed.version() == step);
    previewed.step(options.lr);
    plain.step(options.lr);
    CHECK((preview - previewed.params()).abs().max().item<double>() < kTolerance);
    CHECK(torch::equal(previewed.params(), plain.params()));
  }
  PsShard adam(plan, 0, params, device(), factory(optimizer_options("adamw")), no_sum, false);
  CHECK_THROWS_WITH(adam.preview(0.1), Catch::Contains("SGD's update only"));
}

TEST_CASE("ps SSP with partial reads: each read is a version within k or a round in progress",
          "[dist][ps]") {
  const int64_t k = GENERATE(1, 2);
  const std::string fill = GENERATE("mean", "zero");
  INFO("k = " << k << ", dist.ps.preview_fill = " << fill);
  PsOptions ps = partial_options(k);
  ps.preview_fill = fill;
  expect_partial_reads([&] {
    Net net = make_net();
    PsStrategy strategy(ps, world(), 60.0);
    // Once all workers but one are in.
    return check_partial_reads(net, strategy, k, world()->size() - 1, fill == "mean");
  });
}

TEST_CASE("ps over p2p, partial reads: each read is a version within k or a round in progress",
          "[dist][ps]") {
  const int64_t k = GENERATE(1, 2);
  // 0: a preview at every push; 1: only at all pushes but one. Each with one fill (a divisor
  // of the pushes in, whichever previews go out): the mean at every push, zero at one.
  const int64_t previews = GENERATE(0, 1);
  const std::string fill = previews == 0 ? "mean" : "zero";
  INFO("k = " << k << ", dist.ps.previews = " << previews << ", preview_fill = " << fill);
  PsOptions ps = p2p_options("ssp", k);
  ps.previews = previews;
  ps.preview_fill = fill;
  // A read waits up to a whole step for the round just pushed with all pushes but one in:
  // with one preview a round, the others' pushes must come first, and under load they may
  // trail the reader's by more than the default's share of a step.
  ps.partial_wait = 1.0;
  expect_partial_reads([&] {
    Net net = make_net();
    PsPeerStrategy strategy(ps, world(), 60.0);
    return check_partial_reads(net, strategy, k, previews == 0 ? 1 : world()->size() - 1,
                               fill == "mean");
  });
}

TEST_CASE("ps SSP(0) with partial reads is BSP, bit for bit", "[dist][ps]") {
  const auto options = optimizer_options("sgd");
  const Data data = make_data(world()->size());
  Net bsp = train_colocated(ps_options("colocated", 1, 1000, "bsp"), options, data);
  Net ssp = train_colocated(partial_options(0), options, data);
  CHECK(max_difference(*bsp, *ssp) == 0.0);
}

TEST_CASE("ps over p2p: the first dist.ps.sync_steps steps read as BSP, then within k",
          "[dist][ps]") {
  const auto options = optimizer_options("sgd");
  const Data data = make_data(world()->size());
  // Trains SSP(2) with partial reads and rank 1 slowed, the first `sync` steps synchronous.
  const auto train_ssp = [&](int64_t sync, Net& net) {
    PsOptions ps = p2p_options("ssp", 2);
    ps.sync_steps = sync;
    PsPeerStrategy strategy(ps, world(), 60.0);
    strategy.attach(*net, factory(options));
    for (int64_t step = 0; step < kSteps; ++step) {
      train(net, strategy, data, step, step + 1, options.lr);
      if (step < sync) {
        CHECK(strategy.last_staleness() == 0);
        CHECK(strategy.last_partial_reads() == 0.0);
        CHECK(strategy.last_reads_ahead() == 0.0);
        CHECK(strategy.last_shares_missing() == 0.0);
      }
      CHECK(strategy.last_staleness() <= 2);
      if (world()->rank() == 1) strategy.pause(0.25);  // the others would run ahead
    }
    strategy.finish();
  };
  Net bsp = make_net();
  {
    PsPeerStrategy lockstep(p2p_options("bsp", 0), world(), 60.0);
    lockstep.attach(*bsp, factory(options));
    train(bsp, lockstep, data, 0, kSteps, options.lr);
    lockstep.finish();
  }
  Net all_sync = make_net();
  train_ssp(kSteps, all_sync);
  CHECK(max_difference(*all_sync, *bsp) == 0.0);  // every read the last whole round
  Net half = make_net();
  train_ssp(kSteps / 2, half);
}
