#include "optim/foreach_sgd.h"

#include "optim/multi_tensor.h"
#include "optim/state_key.h"

#include <type_traits>
#include <vector>

namespace dtrain::optim {

torch::Tensor ForeachSGD::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    std::vector<torch::Tensor> params, grads, buffers, fresh_params;
    for (const torch::Tensor& param : group.params()) {
      if (!param.grad().defined()) continue;
      params.push_back(param);
      grads.push_back(param.grad());
    }
    if (params.empty()) continue;
    // Once every parameter has its buffer, on CUDA: one multi-tensor pass (optim/multi_tensor.h),
    // 20 bytes a parameter against the 44 of the list ops below.
    if (options.momentum() != 0.0 && has_multi_tensor_kernels(params.front().device())) {
      for (const torch::Tensor& param : params) {
        auto found = state_.find(state_key<Key>(param));
        if (found == state_.end()) break;
        buffers.push_back(
            static_cast<torch::optim::SGDParamState&>(*found->second).momentum_buffer());
      }
      if (buffers.size() == params.size()) {
        sgd_update_(params, grads, buffers,
                    {options.lr(), options.weight_decay(), options.momentum(),
                     options.dampening(), options.nesterov()});
        continue;
      }
      buffers.clear();
    }
    // d_p = g + wd * p, out of place: the .grad tensors keep the raw gradients.
    std::vector<torch::Tensor> steps = options.weight_decay() != 0.0
                                           ? at::_foreach_add(grads, params, options.weight_decay())
                                           : grads;
    if (options.momentum() != 0.0) {
      std::vector<torch::Tensor> old_buffers, old_steps;
      for (size_t i = 0; i < params.size(); ++i) {
        auto found = state_.find(state_key<Key>(params[i]));
        if (found == state_.end()) {
          auto state = std::make_unique<torch::optim::SGDParamState>();
          state->momentum_buffer(steps[i].clone().detach());
          buffers.push_back(state->momentum_buffer());
          state_[state_key<Key>(params[i])] = std::move(state);
        } else {
          auto& state = static_cast<torch::optim::SGDParamState&>(*found->second);
          buffers.push_back(state.momentum_buffer());
          old_buffers.push_back(state.momentum_buffer());
          old_steps.push_back(steps[i]);
        }
      }
      if (!old_buffers.empty()) {
        at::_foreach_mul_(old_buffers, options.momentum());
        at::_foreach_add_(old_buffers, old_steps, 1.0 - options.dampening());
      }
      steps = options.nesterov() ? at::_foreach_add(steps, buffers, options.momentum()) : buffers;
    }
    at::_foreach_add_(params, steps, -options.lr());
  }
  return loss;
}

}  // namespace dtrain::optim
