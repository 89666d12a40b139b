#include "optim/lamb.h"

#include "optim/multi_tensor.h"
#include "optim/state_key.h"

#include <torch/optim/serialize.h>
#include <torch/version.h>

#include <cmath>

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

namespace {

// grads * clip, clip a 0-d tensor on their device. LibTorch 2.x multiplies a list by one tensor
// in a single multi-tensor launch; 1.x (Debian's) only by a list of them, one kernel each.
std::vector<torch::Tensor> clipped(const std::vector<torch::Tensor>& grads,
                                   const torch::Tensor& clip) {
#if TORCH_VERSION_MAJOR >= 2
  return at::_foreach_mul(grads, clip);
#else
  return at::_foreach_mul(grads, std::vector<torch::Tensor>(grads.size(), clip));
#endif
}

}  // namespace

torch::Tensor Lamb::clip_factor() {
  const double max_norm = static_cast<const LambOptions&>(defaults()).max_grad_norm();
  if (max_norm <= 0.0) return {};
  std::vector<torch::Tensor> grads;
  for (const auto& group : param_groups_) {
    for (const auto& param : group.params()) {
      if (param.grad().defined()) grads.push_back(param.grad());
    }
  }
  torch::Tensor sq_norm =
      grads.empty() ? torch::zeros({}) : torch::stack(at::_foreach_norm(grads)).square().sum();
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
    std::vector<at::Scalar> bias1, sqrt_bias2;  // 1 - b1^t and sqrt(1 - b2^t), per tensor
    for (const torch::Tensor& param : group.params()) {
      if (!param.grad().defined()) continue;
      auto& state = param_state<LambParamState>(state_, param, [&] {
        auto fresh = std::make_unique<LambParamState>();
        fresh->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        return fresh;
      });
      state.step(state.step() + 1);
      const auto t = static_cast<double>(state.step());
      params.push_back(param);
      grads.push_back(param.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      bias1.push_back(1.0 - std::pow(options.beta1(), t));
      sqrt_bias2.push_back(std::sqrt(1.0 - std::pow(options.beta2(), t)));
    }
    std::vector<torch::Tensor> updates;
    if (!params.empty()) {
      if (clip.defined()) {
        grads = clipped(grads, clip);
      }
      at::_foreach_mul_(exp_avgs, options.beta1());
      at::_foreach_add_(exp_avgs, grads, 1.0 - options.beta1());
      at::_foreach_mul_(exp_avg_sqs, options.beta2());
      at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1.0 - options.beta2());
      // r = (m / bias1) / (sqrt(v) / sqrt_bias2 + eps) + wd * w
      std::vector<torch::Tensor> denominators = at::_foreach_sqrt(exp_avg_sqs);
      at::_foreach_div_(denominators, sqrt_bias2);
      at::_foreach_add_(denominators, options.eps());
      updates = at::_foreach_div(exp_avgs, denominators);
      at::_foreach_div_(updates, bias1);
      if (options.weight_decay() != 0.0) {
        at::_foreach_add_(updates, params, options.weight_decay());
      }
    }
    if (options.adapt()) {
      // The reducer runs even for an empty shard, so collectives stay matched.
      const TrustRatioArgs args{1.0, 0.0, options.trust_eps(), options.max_trust_ratio()};
      const torch::Tensor ratios = trust_ratios(params, updates, norm_reducer_, args);
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
