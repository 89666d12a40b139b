// Parameter-server pieces' optimizer state (dist/ps/piece_state.h): whole states of every
// optimizer split into uneven pieces and joined back exactly, through bytes too; a piece
// optimizer given its slices of a whole state steps as the whole one (SGD and AdamW, whose
// updates are element-wise); channels_last parameters cut in memory order. One process's
// logic: each rank runs it alone. Float64 on the CPU.
#include "dist/ps/piece_state.h"

#include "common/error.h"
#include "optim/optimizer.h"

#include "equivalence.h"

#include <catch2/catch.hpp>

#include <vector>

using namespace dtrain::dist;
using Catch::Matchers::Contains;
using equivalence::factory;
using equivalence::optimizer_options;

namespace {

// A weight, a bias (optim's no-decay group) and a channels_last convolution weight.
std::vector<torch::Tensor> make_params() {
  auto gen = at::detail::createCPUGenerator(7);
  std::vector<torch::Tensor> params = {
      at::randn({5, 7}, gen, torch::kFloat64), at::randn({5}, gen, torch::kFloat64),
      at::randn({4, 3, 3, 3}, gen, torch::kFloat64).contiguous(torch::MemoryFormat::ChannelsLast)};
  for (auto& param : params) param.set_requires_grad(true);
  return params;
}

void set_gradients(const std::vector<torch::Tensor>& params, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  for (const auto& param : params) {
    // In the parameter's layout, as autograd makes them.
    param.mutable_grad() = at::randn(param.sizes(), gen, torch::kFloat64)
                               .contiguous(param.suggest_memory_format());
  }
}

// Uneven pieces: three for every parameter here (at least 5 elements).
std::vector<int64_t> piece_offsets(int64_t numel) { return {0, numel / 5 + 1, numel / 2 + 1}; }
int64_t piece_numel(const std::vector<int64_t>& offsets, size_t k, int64_t numel) {
  return (k + 1 < offsets.size() ? offsets[k + 1] : numel) - offsets[k];
}
std::vector<int64_t> piece_shape(const torch::Tensor& param, int64_t numel) {
  return param.dim() >= 2 ? std::vector<int64_t>{numel, 1} : std::vector<int64_t>{numel};
}

// Elements [offset, offset + numel) of `value` in `param`'s memory order, shaped as a piece.
torch::Tensor piece_of(const torch::Tensor& value, const torch::Tensor& param, int64_t offset,
                       int64_t numel) {
  return to_memory_order(value.detach(), param)
      .narrow(0, offset, numel)
      .reshape(piece_shape(param, numel));
}

struct Trained {
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};
Trained trained(const std::string& name, int steps = 3) {
  Trained run{make_params(), nullptr};
  run.optimizer = dtrain::optim::make_optimizer(optimizer_options(name), run.params);
  for (int step = 0; step < steps; ++step) {
    set_gradients(run.params, 100 + step);
    run.optimizer->step();
  }
  return run;
}

StateFields fields_of(const torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  const auto* state = find_state(optimizer, param);
  REQUIRE(state != nullptr);
  return state_fields(*state);
}

// Equal names and values, tensors with equal sizes.
void check_same(const StateFields& actual, const StateFields& expected) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("field " << expected[i].first);
    CHECK(actual[i].first == expected[i].first);
    const c10::IValue& a = actual[i].second;
    const c10::IValue& e = expected[i].second;
    REQUIRE(a.isTensor() == e.isTensor());
    if (!a.isTensor()) {
      CHECK(a == e);
      continue;
    }
    CHECK(a.toTensor().sizes() == e.toTensor().sizes());
    CHECK(torch::equal(a.toTensor(), e.toTensor()));
  }
}

std::vector<StateFields> sliced(const StateFields& whole, const torch::Tensor& param,
                                const std::vector<int64_t>& offsets) {
  std::vector<StateFields> pieces;
  for (size_t k = 0; k < offsets.size(); ++k) {
    const int64_t numel = piece_numel(offsets, k, param.numel());
    pieces.push_back(slice_fields(whole, param, offsets[k], numel, piece_shape(param, numel)));
  }
  return pieces;
}

}  // namespace

TEST_CASE("Whole optimizer states split into pieces join back exactly", "[dist][ps]") {
  const std::string name = GENERATE("sgd", "adamw", "lars", "lamb");
  INFO("optimizer " << name);
  const Trained run = trained(name);
  for (const auto& param : run.params) {
    INFO("parameter " << param.sizes());
    const StateFields whole = fields_of(*run.optimizer, param);
    REQUIRE(!whole.empty());
    const auto offsets = piece_offsets(param.numel());
    const std::vector<StateFields> pieces = sliced(whole, param, offsets);
    for (size_t k = 0; k < pieces.size(); ++k) {
      const int64_t numel = piece_numel(offsets, k, param.numel());
      for (const auto& [field, value] : pieces[k]) {
        if (value.isTensor() && value.toTensor().dim() >= 1) {
          CHECK(value.toTensor().sizes() == at::IntArrayRef(piece_shape(param, numel)));
        }
      }
      check_same(fields_from_bytes(fields_to_bytes(pieces[k]), torch::kCPU), pieces[k]);
    }
    const StateFields joined = join_fields(pieces, offsets, param);
    check_same(joined, whole);
    for (const auto& [field, value] : joined) {
      if (value.isTensor() && value.toTensor().dim() >= 1) {
        INFO("field " << field);
        CHECK(value.toTensor().strides() == param.strides());
      }
    }
  }
}

TEST_CASE("A piece optimizer steps as the whole one on its slices", "[dist][ps]") {
  const std::string name = GENERATE("sgd", "adamw");
  INFO("optimizer " << name);
  const Trained run = trained(name);

  // Pieces of every parameter, their state sliced from the whole state.
  std::vector<torch::Tensor> pieces;
  std::vector<std::pair<size_t, int64_t>> origin;  // (parameter, offset) per piece
  for (size_t i = 0; i < run.params.size(); ++i) {
    const torch::Tensor& param = run.params[i];
    const auto offsets = piece_offsets(param.numel());
    for (size_t k = 0; k < offsets.size(); ++k) {
      const int64_t numel = piece_numel(offsets, k, param.numel());
      pieces.push_back(piece_of(param, param, offsets[k], numel).set_requires_grad(true));
      origin.emplace_back(i, offsets[k]);
    }
  }
  const auto before = pieces[0].clone();
  auto states = prototype_states(factory(optimizer_options(name)), pieces);
  CHECK(torch::equal(pieces[0], before));  // prototypes leave the tensors alone
  auto optimizer = dtrain::optim::make_optimizer(optimizer_options(name), pieces);
  for (size_t j = 0; j < pieces.size(); ++j) {
    const auto& [i, offset] = origin[j];
    REQUIRE(states[j] != nullptr);
    set_state_fields(*states[j], slice_fields(fields_of(*run.optimizer, run.params[i]),
                                              run.params[i], offset, pieces[j].numel(),
                                              pieces[j].sizes()));
    put_state(*optimizer, pieces[j], std::move(states[j]));
  }

  // One more step of each on the same gradient.
  set_gradients(run.params, 200);
  for (size_t j = 0; j < pieces.size(); ++j) {
    const torch::Tensor& param = run.params[origin[j].first];
    pieces[j].mutable_grad() = piece_of(param.grad(), param, origin[j].second, pieces[j].numel());
  }
  run.optimizer->step();
  optimizer->step();

  for (size_t j = 0; j < pieces.size(); ++j) {
    const auto& [i, offset] = origin[j];
    const torch::Tensor& param = run.params[i];
    INFO("piece " << j << " of parameter " << param.sizes() << " at " << offset);
    CHECK(torch::equal(pieces[j].detach(), piece_of(param, param, offset, pieces[j].numel())));
    check_same(fields_of(*optimizer, pieces[j]),
               slice_fields(fields_of(*run.optimizer, param), param, offset, pieces[j].numel(),
                            pieces[j].sizes()));
  }
}

TEST_CASE("Prototype states are null where the optimizer keeps none", "[dist][ps]") {
  auto options = optimizer_options("sgd");
  options.momentum = 0.0;  // plain SGD keeps no state
  const auto params = make_params();
  for (const auto& state : prototype_states(factory(options), params)) CHECK(state == nullptr);
  for (const auto& param : params) CHECK(!param.grad().defined());
}

TEST_CASE("Joining pieces whose step counts differ fails", "[dist][ps]") {
  const Trained run = trained("adamw");
  const torch::Tensor& param = run.params[0];
  const auto offsets = piece_offsets(param.numel());
  std::vector<StateFields> pieces = sliced(fields_of(*run.optimizer, param), param, offsets);
  bool changed = false;
  for (auto& [field, value] : pieces[1]) {
    if (field != "step") continue;
    value = c10::IValue(value.toInt() + 1);
    changed = true;
  }
  REQUIRE(changed);
  CHECK_THROWS_WITH(join_fields(pieces, offsets, param), Contains("field step must agree"));
  CHECK_THROWS_AS(join_fields(pieces, offsets, param), dtrain::InternalError);
}

TEST_CASE("A channels_last parameter is cut in memory order", "[dist][ps]") {
  const torch::Tensor param =
      torch::randn({2, 3, 2, 2}, torch::kFloat64).contiguous(torch::MemoryFormat::ChannelsLast);
  const torch::Tensor storage = param.as_strided({param.numel()}, {1});
  // A field with the parameter's values, in the logical (contiguous) layout.
  const StateFields whole = {{"buffer", param.contiguous()}, {"step", c10::IValue(int64_t{4})}};
  const std::vector<int64_t> offsets = {0, 5, 13};
  const std::vector<StateFields> pieces = sliced(whole, param, offsets);
  for (size_t k = 0; k < pieces.size(); ++k) {
    const int64_t numel = piece_numel(offsets, k, param.numel());
    CHECK(torch::equal(pieces[k][0].second.toTensor().reshape({-1}),
                       storage.narrow(0, offsets[k], numel)));
    CHECK(pieces[k][1].second.toInt() == 4);
  }
  const StateFields joined = join_fields(pieces, offsets, param);
  const torch::Tensor buffer = joined[0].second.toTensor();
  CHECK(torch::equal(buffer, param));
  CHECK(buffer.strides() == param.strides());
  CHECK(joined[1].second.toInt() == 4);
}
