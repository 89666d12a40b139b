#include "dist/strategy.h"

#include "common/error.h"

#include <chrono>
#include <thread>

namespace dtrain::dist {

void Strategy::serve() {
  DTRAIN_CHECK(false, "strategy {} has no server role", name());
}

void Strategy::pause(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

NamedTensors module_state(torch::nn::Module& module) {
  NamedTensors state;
  for (const auto& item : module.named_parameters()) state.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) state.emplace_back(item.key(), item.value());
  return state;
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
