// LARS: SGD with momentum and a layer-wise trust ratio (You, Gitman & Ginsburg 2017), in the
// form of the MLPerf ResNet-50 reference, on whole parameter groups with multi-tensor kernels.
// Sharding contract and norm hook: optim/trust_ratio.h.
#pragma once

#include "optim/trust_ratio.h"

#include <torch/torch.h>

#include <utility>
#include <vector>

namespace dtrain::optim {

struct LarsOptions : public torch::optim::OptimizerCloneableOptions<LarsOptions> {
  LarsOptions(double lr = 0.1) : lr_(lr) {}  // NOLINT(google-explicit-constructor): as torch's
  TORCH_ARG(double, lr) = 0.1;
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weight_decay) = 0.0;
  TORCH_ARG(double, trust_coefficient) = 0.001;  // eta
  TORCH_ARG(double, trust_eps) = 0.0;
  TORCH_ARG(double, max_trust_ratio) = 0.0;  // 0: no clamp
  // false: plain momentum SGD for this group (ratio 1), e.g. biases and BatchNorm.
  TORCH_ARG(bool, adapt) = true;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LarsParamState : public torch::optim::OptimizerCloneableParamState<LarsParamState> {
  TORCH_ARG(torch::Tensor, momentum_buffer);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class Lars : public torch::optim::Optimizer {
 public:
  explicit Lars(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                LarsOptions defaults = {})
      : Optimizer(std::move(param_groups), std::make_unique<LarsOptions>(defaults)) {}

  // Per group, with w the weights, g the gradient, v the momentum buffer (0 at first):
  //   ratio = adapt ? trust ratio (trust_ratio.h, coefficient eta, denominator term wd) : 1
  //   v = momentum * v + lr * ratio * (g + wd * w);  w -= v
  // The buffer holds the scaled step, as in the MLPerf reference, so a learning-rate change
  // enters through new gradients only. No host synchronisation.
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // See NormReducer: makes the norms those of whole tensors under sharding.
  void set_norm_reducer(NormReducer reducer) { norm_reducer_ = std::move(reducer); }

 private:
  NormReducer norm_reducer_;
};

}  // namespace dtrain::optim
