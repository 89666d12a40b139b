#include "dist/strategy.h"

#include "common/error.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

namespace dtrain::dist {

void Strategy::serve() {
  DTRAIN_CHECK(false, "strategy {} has no server role", name());
}

void Strategy::pause(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

void Strategy::after_replayed_backward() {
  DTRAIN_CHECK(false, "strategy {} cannot take a backward replayed from a CUDA graph", name());
}

NamedTensors module_state(torch::nn::Module& module) {
  NamedTensors state;
  for (const auto& item : module.named_parameters()) state.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) state.emplace_back(item.key(), item.value());
  return state;
}

void require_one_dtype(const std::vector<torch::Tensor>& params,
                       const std::vector<std::string>& names, const std::string& strategy) {
  if (params.empty()) {
    throw UserError(fmt::format("dist.strategy = \"{}\": the model has no trainable parameters",
                                strategy));
  }
  for (size_t i = 1; i < params.size(); ++i) {
    if (params[i].scalar_type() == params.front().scalar_type()) continue;
    throw UserError(fmt::format(
        "dist.strategy = \"{}\" needs every parameter in one dtype: {} is {}, {} is {}",
        strategy, names.front(), c10::toString(params.front().scalar_type()), names[i],
        c10::toString(params[i].scalar_type())));
  }
}

void copy_state(const NamedTensors& state, const NamedTensors& targets) {
  DTRAIN_CHECK(state.size() == targets.size(), "state of {} tensors for a model of {}",
               state.size(), targets.size());
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < state.size(); ++i) {
    DTRAIN_CHECK(state[i].first == targets[i].first, "state holds {} where the model has {}",
                 state[i].first, targets[i].first);
    if (!state[i].second.is_same(targets[i].second)) targets[i].second.copy_(state[i].second);
  }
}

}  // namespace dtrain::dist
