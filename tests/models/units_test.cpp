// The unit hooks (common/units.h) on SimpleCNN and ResNet-18: the order in which they fire,
// forward and backward; that they change no output or gradient; that a hook can swap a unit's
// parameter storage in and out, as ZeRO-3 will.
#include "models/registry.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

using namespace dtrain::models;

namespace {

struct Recorder : dtrain::UnitHooks {
  void before_forward(int64_t unit) override { events.push_back(fmt::format("bf{}", unit)); }
  void after_forward(int64_t unit) override { events.push_back(fmt::format("af{}", unit)); }
  void before_backward(int64_t unit) override { events.push_back(fmt::format("bb{}", unit)); }
  void after_backward(int64_t unit) override { events.push_back(fmt::format("ab{}", unit)); }
  std::vector<std::string> events;
};

struct Case {
  std::string name;
  InputShape input;
};

// resnet18 with torchvision's stem: the max-pool between units bn1 and layer1.0 is exercised.
const std::vector<Case> kCases = {{"simple_cnn", {3, 16, 16}}, {"resnet18", {3, 32, 32}}};

std::shared_ptr<Model> make(const Case& c) {
  torch::manual_seed(0);
  ModelOptions options;
  options.name = c.name;
  if (c.name == "simple_cnn") options.width = 8;
  if (c.name == "resnet18") options.stem = "imagenet";
  return make_model(options, c.input, 10);
}

torch::Tensor images(const Case& c) {
  auto gen = at::detail::createCPUGenerator(1);
  return at::randn({2, c.input.channels, c.input.height, c.input.width}, gen);
}

// Forward and backward of a cross-entropy loss from no gradients; returns the logits, detached.
torch::Tensor train_pass(Model& model, const torch::Tensor& x) {
  for (auto& param : model.parameters()) param.mutable_grad().reset();
  const torch::Tensor logits = model.forward(x);
  torch::nn::functional::cross_entropy(logits, torch::tensor({1, 7})).backward();
  return logits.detach();
}

std::vector<torch::Tensor> gradients(Model& model) {
  std::vector<torch::Tensor> grads;
  for (const auto& param : model.parameters()) grads.push_back(param.grad().clone());
  return grads;
}

// bf0 af0 bf1 af1 ... in forward; bbN abN ... bb1 ab1 bb0 [ab0] in backward.
std::vector<std::string> expected_events(int64_t num_units, bool input_requires_grad) {
  std::vector<std::string> events;
  for (int64_t u = 0; u < num_units; ++u) {
    events.push_back(fmt::format("bf{}", u));
    events.push_back(fmt::format("af{}", u));
  }
  for (int64_t u = num_units - 1; u >= 0; --u) {
    events.push_back(fmt::format("bb{}", u));
    if (u > 0 || input_requires_grad) events.push_back(fmt::format("ab{}", u));
  }
  return events;
}

}  // namespace

TEST_CASE("unit hooks fire in unit order forward and in reverse backward", "[models][units]") {
  const Case& c = kCases[GENERATE(0, 1)];
  INFO(c.name);
  auto model = make(c);
  const auto num_units = static_cast<int64_t>(model->units().size());
  const torch::Tensor x = images(c);
  Recorder recorder;
  model->set_unit_hooks(&recorder);

  SECTION("images without grad: the first unit's after_backward does not fire") {
    train_pass(*model, x);
    CHECK(recorder.events == expected_events(num_units, false));
  }
  SECTION("images with grad: every unit's after_backward fires") {
    train_pass(*model, x.clone().requires_grad_(true));
    CHECK(recorder.events == expected_events(num_units, true));
  }
  SECTION("evaluation without grad: forward hooks only") {
    model->eval();
    torch::NoGradGuard no_grad;
    model->forward(x);
    std::vector<std::string> forward = expected_events(num_units, false);
    forward.resize(static_cast<size_t>(2 * num_units));
    CHECK(recorder.events == forward);
  }
  SECTION("none fire once the hooks are removed") {
    model->set_unit_hooks(nullptr);
    train_pass(*model, x.clone().requires_grad_(true));
    CHECK(recorder.events.empty());
  }
}

TEST_CASE("unit hooks change no output or gradient", "[models][units]") {
  const Case& c = kCases[GENERATE(0, 1)];
  INFO(c.name);
  auto model = make(c);
  const torch::Tensor x = images(c);
  // Training-mode BatchNorm normalises with the batch's statistics: both passes agree.
  const torch::Tensor plain_logits = train_pass(*model, x);
  const auto plain_grads = gradients(*model);
  Recorder recorder;
  model->set_unit_hooks(&recorder);
  CHECK(torch::equal(train_pass(*model, x), plain_logits));
  CHECK_FALSE(recorder.events.empty());
  const auto hooked_grads = gradients(*model);
  REQUIRE(hooked_grads.size() == plain_grads.size());
  for (size_t i = 0; i < plain_grads.size(); ++i) {
    INFO(i);
    CHECK(torch::equal(hooked_grads[i], plain_grads[i]));
  }
}

namespace {

// ZeRO-3 in miniature: each unit's parameters are empty except while the unit runs, forward
// and backward; their full values live in a stash (a ZeRO-3 rank would all-gather them).
class Stash : public dtrain::UnitHooks {
 public:
  explicit Stash(Model& model) {
    for (const auto& unit : model.units()) {
      units_.emplace_back();
      for (const auto& param : unit.module->parameters()) {
        units_.back().emplace_back(param, param.detach().clone());
      }
      release(static_cast<int64_t>(units_.size()) - 1);
    }
  }

  void before_forward(int64_t unit) override { gather(unit); }
  void after_forward(int64_t unit) override { release(unit); }
  void before_backward(int64_t unit) override { gather(unit); }
  void after_backward(int64_t unit) override {
    for (const auto& [param, full] : units_[unit]) {
      if (!param.grad().defined()) missing_grads.push_back(unit);
    }
    release(unit);
  }

  bool gathered(int64_t unit) const {
    for (const auto& [param, full] : units_[unit]) {
      if (param.numel() != full.numel()) return false;
    }
    return true;
  }

  std::vector<int64_t> missing_grads;  // units whose after_backward found a gradient missing

 private:
  void gather(int64_t unit) {
    for (auto& [param, full] : units_[unit]) param.set_data(full);
  }
  void release(int64_t unit) {
    for (auto& [param, full] : units_[unit]) param.set_data(torch::empty({0}, full.options()));
  }

  std::vector<std::vector<std::pair<torch::Tensor, torch::Tensor>>> units_;  // (param, full)
};

}  // namespace

TEST_CASE("a hook can swap a unit's parameters in and out, as ZeRO-3 does", "[models][units]") {
  const Case& c = kCases[0];
  auto model = make(c);
  const torch::Tensor x = images(c);
  const torch::Tensor plain_logits = train_pass(*model, x);
  const auto plain_grads = gradients(*model);

  Stash stash(*model);
  model->set_unit_hooks(&stash);
  REQUIRE_FALSE(stash.gathered(0));
  CHECK(torch::equal(train_pass(*model, x), plain_logits));
  CHECK(stash.missing_grads.empty());
  const auto grads = gradients(*model);
  for (size_t i = 0; i < plain_grads.size(); ++i) {
    INFO(i);
    CHECK(torch::equal(grads[i], plain_grads[i]));
  }
  // Released after their backward, except the first unit: on images, its after_backward does
  // not fire, and the strategy releases it once backward has returned.
  CHECK(stash.gathered(0));
  for (int64_t u = 1; u < static_cast<int64_t>(model->units().size()); ++u) {
    CHECK_FALSE(stash.gathered(u));
  }
}
