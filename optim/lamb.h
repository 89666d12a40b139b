// LAMB: Adam moments with a layer-wise trust ratio (You et al. 2020, Algorithm 2), on whole
// parameter groups with multi-tensor kernels; optional global gradient-norm clipping and a
// clamp of the ratio. Sharding contract and norm hooks: optim/trust_ratio.h.
#pragma once

#include "optim/trust_ratio.h"

#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace dtrain::optim {

struct LambOptions : public torch::optim::OptimizerCloneableOptions<LambOptions> {
  LambOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT(google-explicit-constructor): as torch's
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0.0;
  TORCH_ARG(double, trust_eps) = 0.0;
  TORCH_ARG(double, max_trust_ratio) = 0.0;  // 0: no clamp
  // Global over all groups, so only the optimizer's defaults count; 0: no clipping.
  TORCH_ARG(double, max_grad_norm) = 0.0;
  // false: plain Adam with decoupled decay for this group (ratio 1), e.g. biases and norms.
  TORCH_ARG(bool, adapt) = true;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LambParamState : public torch::optim::OptimizerCloneableParamState<LambParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class Lamb : public torch::optim::Optimizer {
 public:
  explicit Lamb(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                LambOptions defaults = {})
      : Optimizer(std::move(param_groups), std::make_unique<LambOptions>(defaults)) {}

  // With G the norm of all gradients of all groups and c = max_grad_norm:
  //   g = grad * (c > 0 ? c / max(G, c) : 1)                  (clipping, as NVIDIA's LAMB)
  // then per group, per tensor with its step count t:
  //   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
  //   r = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * w
  //   ratio = adapt ? ||w|| / (||r|| + trust_eps), 1 if either norm is 0, min(., max_trust_ratio)
  //           : 1;   w -= lr * ratio * r
  // No host synchronisation.
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // See NormReducer and SquaredNormReducer: norms of whole tensors under sharding.
  void set_norm_reducer(NormReducer reducer) { norm_reducer_ = std::move(reducer); }
  void set_grad_norm_reducer(SquaredNormReducer reducer) {
    grad_norm_reducer_ = std::move(reducer);
  }

 private:
  // The clipping factor c / max(G, c) as a 0-d tensor; undefined when clipping is off.
  torch::Tensor clip_factor();

  NormReducer norm_reducer_;
  SquaredNormReducer grad_norm_reducer_;
};

}  // namespace dtrain::optim
