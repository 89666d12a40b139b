// The key of a parameter's entry in torch::optim::Optimizer::state(), for both LibTorch lines.
#pragma once

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace dtrain::optim {

// torch::optim::Optimizer keys its per-parameter state by the TensorImpl: as the pointer
// printed to a string in LibTorch 1.x (c10::guts::to_string), as the pointer itself in 2.x.
// `Key` is the state map's key_type.
template <typename Key>
Key state_key(const torch::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream address;
    address << param.unsafeGetTensorImpl();
    return address.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

// The state of `param` in `optimizer` as `State`, created by `make` at the first call.
template <typename State, typename StateMap, typename Make>
State& param_state(StateMap& state, const torch::Tensor& param, Make make) {
  using Key = typename StateMap::key_type;
  auto key = state_key<Key>(param);
  auto found = state.find(key);
  if (found == state.end()) found = state.emplace(std::move(key), make()).first;
  return static_cast<State&>(*found->second);
}

}  // namespace dtrain::optim
