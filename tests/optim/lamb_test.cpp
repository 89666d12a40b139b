// LAMB against a float64 derivation written here from You et al. 2020, Algorithm 2, with
// parameter groups, clipping, the ratio clamp, edge cases, save/load and the sharded hooks.
#include "golden.h"
#include "optim/lamb.h"
#include "optim/optimizer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>
#include <thread>

using dtrain::optim::OptimizerOptions;
using golden::Flat;

namespace {

OptimizerOptions lamb_options() {
  OptimizerOptions o;
  o.name = "lamb";
  o.lr = 0.05;
  o.beta1 = 0.9;
  o.beta2 = 0.99;
  o.eps = 1e-6;
  o.weight_decay = 1e-2;
  o.decay_norm_and_bias = false;
  o.adapt_norm_and_bias = false;
  return o;
}

// With G the norm of all gradients and c = max_grad_norm: g *= c / max(G, c) when c > 0; then
// per tensor, step t = 1, 2, ...:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  m^ = m / (1 - b1^t);  v^ = v / (1 - b2^t)
//   r = m^ / (sqrt(v^) + eps) + wd_i w
//   ratio = adapt_i ? ||w|| / (||r|| + trust_eps) (1 if a norm is 0, min max) : 1;  w -= lr ratio r
std::vector<Flat> lamb_reference(const OptimizerOptions& o, const golden::Layout& layout,
                                 std::vector<Flat> w, int steps) {
  std::vector<Flat> m, v;
  for (const auto& x : w) {
    m.emplace_back(x.size(), 0.0);
    v.emplace_back(x.size(), 0.0);
  }
  for (int step = 0; step < steps; ++step) {
    const double t = step + 1;
    std::vector<Flat> g(w.size());
    double total_sq = 0.0;
    for (size_t i = 0; i < w.size(); ++i) {
      for (const double x : w[i]) g[i].push_back(golden::grad_of(layout, i, x, step));
      total_sq += golden::sq_norm(g[i]);
    }
    const double c = o.max_grad_norm;
    const double clip = c > 0.0 ? c / std::max(std::sqrt(total_sq), c) : 1.0;
    for (size_t i = 0; i < w.size(); ++i) {
      const bool one_d = layout.shapes[i].size() == 1;
      const double wd = one_d && !o.decay_norm_and_bias ? 0.0 : o.weight_decay;
      const bool adapt = !one_d || o.adapt_norm_and_bias;
      Flat r(w[i].size());
      for (size_t k = 0; k < r.size(); ++k) {
        const double gk = g[i][k] * clip;
        m[i][k] = o.beta1 * m[i][k] + (1.0 - o.beta1) * gk;
        v[i][k] = o.beta2 * v[i][k] + (1.0 - o.beta2) * gk * gk;
        const double m_hat = m[i][k] / (1.0 - std::pow(o.beta1, t));
        const double v_hat = v[i][k] / (1.0 - std::pow(o.beta2, t));
        r[k] = m_hat / (std::sqrt(v_hat) + o.eps) + wd * w[i][k];
      }
      const double w_norm = std::sqrt(golden::sq_norm(w[i]));
      const double r_norm = std::sqrt(golden::sq_norm(r));
      double ratio = 1.0;
      if (adapt && w_norm > 0.0 && r_norm > 0.0) ratio = w_norm / (r_norm + o.trust_eps);
      if (adapt && o.max_trust_ratio > 0.0) ratio = std::min(ratio, o.max_trust_ratio);
      for (size_t k = 0; k < r.size(); ++k) w[i][k] -= o.lr * ratio * r[k];
    }
  }
  return w;
}

std::vector<torch::Tensor> run_lamb(const OptimizerOptions& o, const golden::Layout& layout,
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

TEST_CASE("LAMB matches the float64 derivation", "[optim][lamb]") {
  auto o = lamb_options();
  o.weight_decay = GENERATE(0.0, 1e-2);
  o.adapt_norm_and_bias = GENERATE(false, true);
  o.decay_norm_and_bias = o.adapt_norm_and_bias;
  o.max_trust_ratio = GENERATE(0.0, 0.5);
  o.max_grad_norm = GENERATE(0.0, 1.0, 1e3);  // off, binding, not binding
  const golden::Layout layout;
  const auto start = golden::start_values(layout);
  golden::check_close(run_lamb(o, layout, start, 6), lamb_reference(o, layout, start, 6));
}

TEST_CASE("LAMB keeps ratio 1 for a zero weight or a zero update", "[optim][lamb]") {
  auto o = lamb_options();
  o.adapt_norm_and_bias = true;
  o.weight_decay = 0.0;  // a zero gradient then gives a zero update
  golden::Layout layout;
  auto start = golden::start_values(layout);
  SECTION("zero weights") {
    std::fill(start[0].begin(), start[0].end(), 0.0);
    std::fill(start[1].begin(), start[1].end(), 0.0);
  }
  SECTION("zero gradients") {
    layout.curvature[2] = 0.0;
    layout.wiggle[2] = 0.0;
  }
  const auto result = run_lamb(o, layout, start, 4);
  golden::check_close(result, lamb_reference(o, layout, start, 4));
  for (const auto& p : result) CHECK(torch::isfinite(p).all().item<bool>());
}

TEST_CASE("LAMB continues identically after save and load", "[optim][lamb]") {
  auto o = lamb_options();
  o.max_grad_norm = 1.0;
  golden::check_save_load_continuation(o);
}

TEST_CASE("LAMB on row halves with summing reducers equals LAMB on whole tensors",
          "[optim][lamb][sharding]") {
  auto o = lamb_options();
  o.max_grad_norm = 1.0;  // binding, so the global gradient norm matters
  const golden::Layout layout;
  const auto start = golden::start_values(layout);
  const auto whole = run_lamb(o, layout, start, 5);

  golden::PairSum all_reduce;
  std::vector<std::vector<torch::Tensor>> halves(2);
  auto run_shard = [&](int rank) {
    auto full = golden::to_tensors(layout, start);
    for (auto& p : full) {
      const int64_t rows = p.size(0) / 2;
      halves[rank].push_back(p.detach().narrow(0, rank * rows, rows).clone().requires_grad_(true));
    }
    auto optimizer = dtrain::optim::make_optimizer(o, halves[rank]);
    auto& lamb = dynamic_cast<dtrain::optim::Lamb&>(*optimizer);
    lamb.set_norm_reducer([&, rank](const std::vector<torch::Tensor>&, const torch::Tensor& sq) {
      return all_reduce.sum(rank, sq);
    });
    lamb.set_grad_norm_reducer(
        [&, rank](const torch::Tensor& sq) { return all_reduce.sum(rank, sq); });
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

TEST_CASE("LAMB options are validated", "[optim][lamb]") {
  auto o = lamb_options();
  CHECK(o.validate().empty());
  o.beta2 = 1.0;
  o.max_grad_norm = -1.0;
  CHECK(o.validate().size() == 2);
}
