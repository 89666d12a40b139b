#include "optim/lars.h"

#include "optim/multi_tensor.h"
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
    if (!options.adapt()) {
      step_sizes = torch::full({static_cast<int64_t>(params.size())}, options.lr(),
                               params.front().options());
    }
    std::vector<torch::Tensor> buffers;
    if (options.momentum() != 0.0) {
      for (const auto& param : params) {
        auto& state = param_state<LarsParamState>(state_, param, [&] {
          auto fresh = std::make_unique<LarsParamState>();
          fresh->momentum_buffer(torch::zeros_like(param, torch::MemoryFormat::Preserve));
          return fresh;
        });
        buffers.push_back(state.momentum_buffer());
      }
    }
    lars_update_(params, grads, buffers, step_sizes, options.weight_decay(), options.momentum());
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
