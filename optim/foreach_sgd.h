// SGD with momentum, the arithmetic of torch::optim::SGD applied to whole parameter groups
// with multi-tensor (_foreach) kernels: a handful of launches per step on CUDA instead of
// four per parameter, as PyTorch's Python SGD does by default (foreach=True). On CUDA, once
// the momentum buffers exist, one fused pass (optim::sgd_update_) in place of the list ops.
// State and checkpoints are torch::optim::SGD's, so the two are interchangeable.
#pragma once

#include <torch/torch.h>

namespace dtrain::optim {

class ForeachSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  // Per group, with g = grad, b = momentum buffer, lr, wd, momentum m, dampening d:
  //   g += wd * p;  b = g at the first step, else b = m * b + (1 - d) * g;
  //   p -= lr * (nesterov ? g + m * b : b)
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace dtrain::optim
