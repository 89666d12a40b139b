// LARS against a float64 derivation written here from You et al. 2017 (MLPerf form), with
// parameter groups, edge cases, save/load and the sharded-norm hook.
#include "golden.h"
#include "optim/lars.h"
#include "optim/optimizer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>
#include <thread>

using dtrain::optim::OptimizerOptions;
using golden::Flat;

namespace {

OptimizerOptions lars_options() {
  OptimizerOptions o;
  o.name = "lars";
  o.lr = 0.8;
  o.momentum = 0.9;
  o.weight_decay = 1e-2;
  o.trust_coefficient = 0.02;
  o.trust_eps = 1e-9;
  o.decay_norm_and_bias = false;
  o.adapt_norm_and_bias = false;
  return o;
}

// Per tensor i, with the gradient g of golden::grad_of:
//   ratio = adapt_i ? eta ||w|| / (||g|| + wd_i ||w|| + eps) (1 if a norm is 0, min max) : 1
//   v = momentum v + lr ratio (g + wd_i w);  w -= v
// Tensor 1 is the only 1-D tensor: group 1 unless decay_norm_and_bias and adapt_norm_and_bias.
std::vector<Flat> lars_reference(const OptimizerOptions& o, const golden::Layout& layout,
                                 std::vector<Flat> w, int steps) {
  std::vector<Flat> v;
  for (const auto& x : w) v.emplace_back(x.size(), 0.0);
  for (int t = 0; t < steps; ++t) {
    for (size_t i = 0; i < w.size(); ++i) {
      const bool one_d = layout.shapes[i].size() == 1;
      const double wd = one_d && !o.decay_norm_and_bias ? 0.0 : o.weight_decay;
      const bool adapt = !one_d || o.adapt_norm_and_bias;
      Flat g(w[i].size());
      for (size_t k = 0; k < g.size(); ++k) g[k] = golden::grad_of(layout, i, w[i][k], t);
      const double w_norm = std::sqrt(golden::sq_norm(w[i]));
      const double g_norm = std::sqrt(golden::sq_norm(g));
      double ratio = 1.0;
      if (adapt && w_norm > 0.0 && g_norm > 0.0) {
        ratio = o.trust_coefficient * w_norm / (g_norm + wd * w_norm + o.trust_eps);
      }
      if (adapt && o.max_trust_ratio > 0.0) ratio = std::min(ratio, o.max_trust_ratio);
      for (size_t k = 0; k < g.size(); ++k) {
        v[i][k] = o.momentum * v[i][k] + o.lr * ratio * (g[k] + wd * w[i][k]);
        w[i][k] -= v[i][k];
      }
    }
  }
  return w;
}

std::vector<torch::Tensor> run_lars(const OptimizerOptions& o, const golden::Layout& layout,
                                    const std::vector<Flat>& start, int steps) {
  auto params = golden::to_tensors(layout, start);
  auto optimizer = dtrain::optim::make_optimizer(o, params);
  for (int t = 0; t < steps; ++t) {
    golden::set_grads(layout, params, t);
    optimizer->step();
  }
  return params;
}

}  // namespace

TEST_CASE("LARS matches the float64 derivation", "[optim][lars]") {
  auto o = lars_options();
  o.weight_decay = GENERATE(0.0, 1e-2);
  o.adapt_norm_and_bias = GENERATE(false, true);
  o.decay_norm_and_bias = o.adapt_norm_and_bias;
  o.max_trust_ratio = GENERATE(0.0, 0.05);
  o.momentum = GENERATE(0.0, 0.9);
  const golden::Layout layout;
  const auto start = golden::start_values(layout);
  golden::check_close(run_lars(o, layout, start, 6), lars_reference(o, layout, start, 6));
}

TEST_CASE("LARS keeps ratio 1 for a zero weight or a zero gradient", "[optim][lars]") {
  auto o = lars_options();
  o.adapt_norm_and_bias = true;
  golden::Layout layout;
  auto start = golden::start_values(layout);
  SECTION("zero weights") {
    std::fill(start[0].begin(), start[0].end(), 0.0);
    std::fill(start[2].begin(), start[2].end(), 0.0);
  }
  SECTION("zero gradients") {
    layout.curvature[0] = 0.0;
    layout.wiggle[0] = 0.0;
  }
  // One step pins the guard: w -= lr * 1 * (g + wd w).
  golden::check_close(run_lars(o, layout, start, 1), lars_reference(o, layout, start, 1));
  golden::check_close(run_lars(o, layout, start, 4), lars_reference(o, layout, start, 4));
}

TEST_CASE("LARS continues identically after save and load", "[optim][lars]") {
  const auto o = lars_options();
  golden::check_save_load_continuation(o);
}

TEST_CASE("LARS on row halves with a summing norm reducer equals LARS on whole tensors",
          "[optim][lars][sharding]") {
  const auto o = lars_options();
  const golden::Layout layout;
  const auto start = golden::start_values(layout);
  const auto whole = run_lars(o, layout, start, 5);

  // Shard r holds rows [r * n/2, (r + 1) * n/2) of every tensor (dim 0 is even for all).
  golden::PairSum all_reduce;
  std::vector<std::vector<torch::Tensor>> halves(2);
  auto run_shard = [&](int rank) {
    auto full = golden::to_tensors(layout, start);
    for (auto& p : full) {
      const int64_t rows = p.size(0) / 2;
      halves[rank].push_back(p.detach().narrow(0, rank * rows, rows).clone().requires_grad_(true));
    }
    auto optimizer = dtrain::optim::make_optimizer(o, halves[rank]);
    dynamic_cast<dtrain::optim::Lars&>(*optimizer).set_norm_reducer(
        [&, rank](const std::vector<torch::Tensor>&, const torch::Tensor& sq_norms) {
          return all_reduce.sum(rank, sq_norms);
        });
    for (int t = 0; t < 5; ++t) {
      golden::set_grads(layout, halves[rank], t);
      optimizer->step();
    }
  };
  std::thread other(run_shard, 1);
  run_shard(0);
  other.join();
  for (size_t i = 0; i < whole.size(); ++i) {
    const auto joined = torch::cat({halves[0][i], halves[1][i]}, 0);
    CHECK(torch::allclose(joined, whole[i], 1e-13, 1e-15));
  }
}

TEST_CASE("LARS options are validated", "[optim][lars]") {
  auto o = lars_options();
  CHECK(o.validate().empty());
  o.trust_coefficient = 0.0;
  o.max_trust_ratio = -1.0;
  o.trust_eps = -1.0;
  CHECK(o.validate().size() == 3);
}
