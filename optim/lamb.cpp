#include "optim/lamb.h"

#include "optim/multi_tensor.h"
#include "optim/state_key.h"

#include <torch/optim/serialize.h>


namespace dtrain::optim {

void LambOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, beta1);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, beta2);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, trust_eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, max_trust_ratio);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, max_grad_norm);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, adapt);
}

void LambOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(beta1);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(beta2);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(trust_eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(max_trust_ratio);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(max_grad_norm);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(adapt);
}

void LambParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
}

void LambParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
}

torch::Tensor Lamb::clip_factor() {
  const double max_norm = static_cast<const LambOptions&>(defaults()).max_grad_norm();
  if (max_norm <= 0.0) return {};
  std::vector<torch::Tensor> grads;
  for (const auto& group : param_groups_) {
    for (const auto& param : group.params()) {
      if (param.grad().defined()) grads.push_back(param.grad());
    }
  }
  torch::Tensor sq_norm = grads.empty() ? torch::zeros({}) : squared_norms(grads).sum();
  if (grad_norm_reducer_) sq_norm = grad_norm_reducer_(sq_norm);
  return max_norm / sq_norm.sqrt().clamp_min(max_norm);
}

torch::Tensor Lamb::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  const torch::Tensor clip = clip_factor();
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const LambOptions&>(group.options());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<int64_t> steps;
    for (const torch::Tensor& param : group.params()) {
      if (!param.grad().defined()) continue;
      auto& state = param_state<LambParamState>(state_, param, [&] {
        auto fresh = std::make_unique<LambParamState>();
        fresh->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        return fresh;
      });
      state.step(state.step() + 1);
      params.push_back(param);
      grads.push_back(param.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      steps.push_back(state.step());
    }
    const LambDirectionArgs direction{options.beta1(), options.beta2(), options.eps(),
                                      options.weight_decay()};
    const TrustRatioArgs trust{1.0, 0.0, options.trust_eps(), options.max_trust_ratio()};
    if (options.adapt()) {
      // On CUDA: the moments and the norms in one pass, the weights in a second.
      const torch::Tensor sq_norms =
          lamb_moments_(params, grads, exp_avgs, exp_avg_sqs, steps, clip, direction);
      if (sq_norms.defined()) {
        const torch::Tensor ratios =
            trust_ratios_of_squares(params, sq_norms, norm_reducer_, trust);
        lamb_apply_(params, exp_avgs, exp_avg_sqs, steps, ratios, direction, -options.lr());
        continue;
      }
    }
    const std::vector<torch::Tensor> updates =
        lamb_directions(params, grads, exp_avgs, exp_avg_sqs, steps, clip, direction);
    if (options.adapt()) {
      // The reducer runs even for an empty shard, so collectives stay matched.
      const torch::Tensor ratios = trust_ratios(params, updates, norm_reducer_, trust);
      if (params.empty()) continue;
      add_scaled_(params, updates, ratios, -options.lr());
    } else if (!params.empty()) {
      at::_foreach_add_(params, updates, -options.lr());
    }
  }
  return loss;
}

void Lamb::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

void Lamb::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

}  // namespace dtrain::optim
