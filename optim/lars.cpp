#include "optim/lars.h"

#include "optim/state_key.h"

#include <torch/optim/serialize.h>

namespace dtrain::optim {

void LarsOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, momentum);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, trust_coefficient);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, trust_eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, max_trust_ratio);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, adapt);
}

void LarsOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(trust_coefficient);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(trust_eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(max_trust_ratio);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(adapt);
}

void LarsParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, momentum_buffer);
}

void LarsParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum_buffer);
}

torch::Tensor Lars::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const LarsOptions&>(group.options());
    std::vector<torch::Tensor> params, grads;
    for (const torch::Tensor& param : group.params()) {
      if (!param.grad().defined()) continue;
      params.push_back(param);
      grads.push_back(param.grad());
    }
    // [n] per-tensor step sizes lr * ratio; the reducer runs even for an empty shard.
    torch::Tensor step_sizes;
    if (options.adapt()) {
      const TrustRatioArgs args{options.trust_coefficient(), options.weight_decay(),
                                options.trust_eps(), options.max_trust_ratio()};
      step_sizes = trust_ratios(params, grads, norm_reducer_, args).mul_(options.lr());
    }
    if (params.empty()) continue;
    // d = lr * ratio * (g + wd * w), out of place: the .grad tensors keep the raw gradients.
    std::vector<torch::Tensor> steps;
    if (options.weight_decay() != 0.0) {
      steps = at::_foreach_add(grads, params, options.weight_decay());
      if (options.adapt()) {
        scale_each_(steps, step_sizes);
      } else {
        at::_foreach_mul_(steps, options.lr());
      }
    } else {
      steps = options.adapt() ? at::_foreach_mul(grads, step_sizes.unbind(0))
                              : at::_foreach_mul(grads, options.lr());
    }
    if (options.momentum() != 0.0) {
      std::vector<torch::Tensor> buffers;
      for (const auto& param : params) {
        auto& state = param_state<LarsParamState>(state_, param, [&] {
          auto fresh = std::make_unique<LarsParamState>();
          fresh->momentum_buffer(torch::zeros_like(param, torch::MemoryFormat::Preserve));
          return fresh;
        });
        buffers.push_back(state.momentum_buffer());
      }
      at::_foreach_mul_(buffers, options.momentum());
      at::_foreach_add_(buffers, steps);
      steps = std::move(buffers);
    }
    at::_foreach_add_(params, steps, -1.0);
  }
  return loss;
}

void Lars::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<LarsParamState, LarsOptions>(archive, *this);
}

void Lars::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<LarsParamState, LarsOptions>(archive, *this);
}

}  // namespace dtrain::optim
