// Builds torch optimizers from OptimizerOptions, on any set of tensors (a whole model,
// a rank's shard, a server's shard), with weight-decay parameter groups.
#pragma once

#include "optim/options.h"
#include "optim/trust_ratio.h"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace dtrain::optim {

// Group 0: tensors that take weight decay; group 1 (when decay_norm_and_bias is false):
// 1-D tensors (biases, BatchNorm affine), without it. For lars/lamb, group 1 also forms when
// adapt_norm_and_bias is false, and then takes no trust-ratio adaptation (optimizer.cpp).
// Keys left at "the optimizer's default" (eps = 0) take it (OptimizerOptions::resolved()).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& options,
                                                        const std::vector<torch::Tensor>& params);

// Sets the learning rate of every parameter group.
void set_lr(torch::optim::Optimizer& optimizer, double lr);

// Installs the reducer of a global squared gradient norm (trust_ratio.h) on an optimizer that
// takes one (LAMB with clipping); returns whether it did. For sharding strategies, which know
// optimizers only through the factory.
bool set_grad_norm_reducer(torch::optim::Optimizer& optimizer, SquaredNormReducer reducer);

// Installs the reducer of per-tensor squared norms (trust_ratio.h) on an optimizer with
// trust ratios (LARS, LAMB); returns whether it did.
bool set_norm_reducer(torch::optim::Optimizer& optimizer, NormReducer reducer);

}  // namespace dtrain::optim
