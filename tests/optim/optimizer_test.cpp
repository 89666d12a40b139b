// Optimizers against float64 references derived here from the update rules, parameter groups,
// set_lr and the size of their state.
#include "optim/lamb.h"
#include "optim/optimizer.h"
#include "optim/state_bytes.h"

#include <catch2/catch.hpp>

#include <array>
#include <cmath>

using dtrain::optim::make_optimizer;
using dtrain::optim::OptimizerOptions;

namespace {

using Vec = std::array<double, 3>;

// Loss 0.5 * sum(c_i p_i^2), so the gradient c_i p_i depends on where the step lands.
const Vec kCurvature = {1.0, 2.0, 0.5};
const Vec kStart = {1.0, -2.0, 0.5};

torch::Tensor start_tensor() {
  return torch::tensor({kStart[0], kStart[1], kStart[2]}, torch::kFloat64).requires_grad_(true);
}

// Runs `steps` steps of `options` from kStart on the loss above, in float64.
Vec run_torch(const OptimizerOptions& options, int steps) {
  auto param = start_tensor();
  const auto curvature =
      torch::tensor({kCurvature[0], kCurvature[1], kCurvature[2]}, torch::kFloat64);
  auto optimizer = make_optimizer(options, {param});
  for (int t = 0; t < steps; ++t) {
    optimizer->zero_grad();
    (0.5 * curvature * param * param).sum().backward();
    optimizer->step();
  }
  return {param[0].item<double>(), param[1].item<double>(), param[2].item<double>()};
}

// SGD with momentum mu, L2 weight decay wd, dampening 0 (Sutskever et al. 2013; PyTorch form):
//   g = grad + wd p;  b_1 = g,  b_t = mu b_{t-1} + g;  d = nesterov ? g + mu b_t : b_t;
//   p -= lr d
Vec sgd_reference(const OptimizerOptions& o, int steps) {
  Vec p = kStart, b{};
  for (int t = 1; t <= steps; ++t) {
    for (int i = 0; i < 3; ++i) {
      const double g = kCurvature[i] * p[i] + o.weight_decay * p[i];
      b[i] = t == 1 ? g : o.momentum * b[i] + g;
      const double d = o.nesterov ? g + o.momentum * b[i] : b[i];
      p[i] -= o.lr * d;
    }
  }
  return p;
}

// AdamW, Loshchilov & Hutter 2019, Algorithm 2 (schedule multiplier 1, alpha = lr, decay
// lambda = lr * wd applied to the pre-step weights):
//   m_t = b1 m + (1 - b1) g;  v_t = b2 v + (1 - b2) g^2;
//   m^ = m_t / (1 - b1^t);  v^ = v_t / (1 - b2^t);
//   p -= lr (m^ / (sqrt(v^) + eps) + wd p)
Vec adamw_reference(const OptimizerOptions& o, int steps) {
  Vec p = kStart, m{}, v{};
  for (int t = 1; t <= steps; ++t) {
    for (int i = 0; i < 3; ++i) {
      const double g = kCurvature[i] * p[i];
      m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * g * g;
      const double m_hat = m[i] / (1.0 - std::pow(o.beta1, t));
      const double v_hat = v[i] / (1.0 - std::pow(o.beta2, t));
      p[i] -= o.lr * (m_hat / (std::sqrt(v_hat) + o.eps) + o.weight_decay * p[i]);
    }
  }
  return p;
}

void check_close(const Vec& actual, const Vec& expected) {
  for (int i = 0; i < 3; ++i) {
    INFO("element " << i);
    CHECK(actual[i] == Approx(expected[i]).epsilon(1e-12).margin(1e-14));
  }
}

}  // namespace

TEST_CASE("SGD matches the momentum recurrence in float64", "[optim][sgd]") {
  OptimizerOptions options;
  options.name = "sgd";
  options.lr = 0.1;
  options.momentum = 0.9;
  options.weight_decay = 0.01;
  SECTION("heavy ball") {
    options.nesterov = false;
    check_close(run_torch(options, 3), sgd_reference(options, 3));
    // One step by hand: p = 1, g = 1 + 0.01, b = g; p = 1 - 0.1 * 1.01.
    CHECK(run_torch(options, 1)[0] == Approx(1.0 - 0.1 * 1.01).epsilon(1e-12));
  }
  SECTION("Nesterov") {
    options.nesterov = true;
    check_close(run_torch(options, 3), sgd_reference(options, 3));
    // First step: d = g + 0.9 g.
    CHECK(run_torch(options, 1)[0] == Approx(1.0 - 0.1 * 1.9 * 1.01).epsilon(1e-12));
  }
  SECTION("plain SGD") {
    options.momentum = 0.0;
    options.weight_decay = 0.0;
    check_close(run_torch(options, 3), sgd_reference(options, 3));
  }
}

TEST_CASE("AdamW matches the decoupled-decay recurrence in float64", "[optim][adamw]") {
  OptimizerOptions options;
  options.name = "adamw";
  options.lr = 0.05;
  options.beta1 = 0.9;
  options.beta2 = 0.99;
  options.eps = 1e-3;  // large enough that its place (outside the sqrt) matters
  options.weight_decay = 0.1;
  check_close(run_torch(options, 3), adamw_reference(options, 3));
  // The first step moves every weight by about lr (m^/sqrt(v^) = sign g) plus the decay.
  const Vec one = run_torch(options, 1);
  CHECK(one[0] == Approx(1.0 - 0.05 * (1.0 / (1.0 + 1e-3) + 0.1)).epsilon(1e-12));
}

TEST_CASE("eps = 0 takes the chosen optimizer's own default", "[optim][defaults]") {
  OptimizerOptions options;
  REQUIRE(options.eps == 0.0);
  options.name = "adamw";
  CHECK(options.resolved().eps == 1e-8);  // torch.optim.AdamW
  options.name = "lamb";
  CHECK(options.resolved().eps == 1e-6);  // You et al. 2020; apex FusedLAMB
  for (const auto& name : {"sgd", "lars"}) {
    options.name = name;
    CHECK(options.resolved().eps == 0.0);  // they have no epsilon
  }
  options.name = "lamb";
  options.eps = 1e-7;
  CHECK(options.resolved().eps == 1e-7);  // set by the user: kept

  // make_optimizer resolves it too, for callers that never went through the config.
  options.eps = 0.0;
  auto lamb = make_optimizer(options, {start_tensor()});
  CHECK(static_cast<const dtrain::optim::LambOptions&>(lamb->param_groups()[0].options()).eps() ==
        1e-6);
  options.name = "adamw";
  auto adamw = make_optimizer(options, {start_tensor()});
  CHECK(static_cast<const torch::optim::AdamWOptions&>(adamw->param_groups()[0].options()).eps() ==
        1e-8);
}

TEST_CASE("weight decay groups split off 1-D tensors", "[optim][groups]") {
  auto weight = torch::randn({4, 3}, torch::requires_grad());
  auto conv = torch::randn({2, 1, 3, 3}, torch::requires_grad());
  auto bias = torch::randn({4}, torch::requires_grad());
  auto gamma = torch::ones({2}, torch::requires_grad());
  const std::vector<torch::Tensor> params = {weight, bias, conv, gamma};

  OptimizerOptions options;
  options.weight_decay = 0.5;

  SECTION("decay_norm_and_bias = true: one group") {
    auto optimizer = make_optimizer(options, params);
    REQUIRE(optimizer->param_groups().size() == 1);
    CHECK(optimizer->param_groups()[0].params().size() == 4);
  }

  SECTION("decay_norm_and_bias = false: 1-D tensors in group 1 without decay") {
    options.decay_norm_and_bias = false;
    for (const auto& name : {"sgd", "adamw"}) {
      options.name = name;
      auto optimizer = make_optimizer(options, params);
      auto& groups = optimizer->param_groups();
      REQUIRE(groups.size() == 2);
      REQUIRE(groups[0].params().size() == 2);
      CHECK(groups[0].params()[0].is_same(weight));
      CHECK(groups[0].params()[1].is_same(conv));
      REQUIRE(groups[1].params().size() == 2);
      CHECK(groups[1].params()[0].is_same(bias));
      CHECK(groups[1].params()[1].is_same(gamma));
      if (options.name == "sgd") {
        using torch::optim::SGDOptions;
        CHECK(static_cast<SGDOptions&>(groups[0].options()).weight_decay() == 0.5);
        CHECK(static_cast<SGDOptions&>(groups[1].options()).weight_decay() == 0.0);
        CHECK(static_cast<SGDOptions&>(groups[1].options()).momentum() == options.momentum);
      } else {
        using torch::optim::AdamWOptions;
        CHECK(static_cast<AdamWOptions&>(groups[0].options()).weight_decay() == 0.5);
        CHECK(static_cast<AdamWOptions&>(groups[1].options()).weight_decay() == 0.0);
        CHECK(std::get<1>(static_cast<AdamWOptions&>(groups[1].options()).betas()) == 0.999);
      }
    }
  }

  SECTION("with zero gradients only the decayed group moves") {
    options.decay_norm_and_bias = false;
    options.momentum = 0.0;
    auto optimizer = make_optimizer(options, params);
    const auto weight_before = weight.detach().clone();
    const auto bias_before = bias.detach().clone();
    for (const auto& param : params) param.mutable_grad() = torch::zeros_like(param);
    optimizer->step();
    CHECK(torch::allclose(weight, weight_before * (1.0 - options.lr * 0.5)));
    CHECK(torch::equal(bias, bias_before));
  }

  SECTION("a shard of only 1-D tensors leaves group 0 empty but steps") {
    options.decay_norm_and_bias = false;
    auto optimizer = make_optimizer(options, {bias});
    REQUIRE(optimizer->param_groups().size() == 2);
    CHECK(optimizer->param_groups()[0].params().empty());
    bias.mutable_grad() = torch::ones_like(bias);
    const auto before = bias.detach().clone();
    optimizer->step();
    CHECK(torch::allclose(bias, before - options.lr));
  }
}

TEST_CASE("set_lr changes every group", "[optim][groups]") {
  OptimizerOptions options;
  options.decay_norm_and_bias = false;
  const std::vector<torch::Tensor> params = {torch::randn({3, 3}, torch::requires_grad()),
                                             torch::randn({3}, torch::requires_grad())};
  for (const auto& name : {"sgd", "adamw"}) {
    options.name = name;
    auto optimizer = make_optimizer(options, params);
    REQUIRE(optimizer->param_groups().size() == 2);
    for (auto& group : optimizer->param_groups()) CHECK(group.options().get_lr() == options.lr);
    dtrain::optim::set_lr(*optimizer, 0.0123);
    for (auto& group : optimizer->param_groups()) CHECK(group.options().get_lr() == 0.0123);
  }
}

TEST_CASE("unknown optimizer names are user errors", "[optim][groups]") {
  OptimizerOptions options;
  options.name = "lion";
  CHECK_THROWS_AS(make_optimizer(options, {torch::zeros({2}, torch::requires_grad())}),
                  dtrain::UserError);
  CHECK_THROWS_WITH(make_optimizer(options, {torch::zeros({2}, torch::requires_grad())}),
                    Catch::Matchers::Contains("lion") && Catch::Matchers::Contains("lars"));
  CHECK_FALSE(options.validate().empty());
}

TEST_CASE("beta1 and beta2 lie in [0, 1) for adamw and lamb alike", "[optim][defaults]") {
  for (const std::string name : {"adamw", "lamb"}) {
    for (const bool first : {true, false}) {
      OptimizerOptions options;
      options.name = name;
      (first ? options.beta1 : options.beta2) = 1.0;
      const auto errors = options.validate();
      REQUIRE(errors.size() == 1);
      CHECK(errors[0].key == (first ? "beta1" : "beta2"));
      CHECK(errors[0].problem == "1 is outside [0, 1)");
      (first ? options.beta1 : options.beta2) = 0.0;
      CHECK(options.validate().empty());
    }
  }
}

TEST_CASE("state_bytes counts each optimizer's state per parameter element", "[optim][state]") {
  // Momentum: one buffer per parameter (none without momentum); Adam moments: two. What
  // state_tensors_per_parameter() predicts is what the optimizer holds after a step.
  struct Case {
    std::string name;
    double momentum;
    int64_t per_element;
  };
  const std::vector<Case> cases = {{"sgd", 0.9, 1}, {"sgd", 0.0, 0}, {"adamw", 0.9, 2},
                                   {"lars", 0.9, 1}, {"lars", 0.0, 0}, {"lamb", 0.9, 2}};
  for (const Case& c : cases) {
    INFO("optimizer " << c.name << ", momentum " << c.momentum);
    OptimizerOptions options;
    options.name = c.name;
    options.momentum = c.momentum;
    CHECK(dtrain::optim::state_tensors_per_parameter(options) == c.per_element);
    const std::vector<torch::Tensor> params = {
        torch::randn({4, 5}, torch::requires_grad()),
        torch::randn({5}, torch::dtype(torch::kFloat64).requires_grad(true))};
    auto optimizer = make_optimizer(options, params);
    CHECK(dtrain::optim::state_bytes(*optimizer) == 0);  // state comes with the first step
    for (const auto& param : params) param.sum().backward();
    optimizer->step();
    CHECK(dtrain::optim::state_bytes(*optimizer) == c.per_element * (20 * 4 + 5 * 8));
  }
}
