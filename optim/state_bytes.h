// Bytes of optimizer state an optimizer holds (momentum, Adam moments), for the memory metrics
// that show what sharding the state saves.
#pragma once

#include "optim/options.h"

#include <torch/torch.h>

#include <cstdint>

namespace dtrain::optim {

// Sums the state tensors of the optimizers make_optimizer builds (SGD, AdamW, LARS, LAMB); 0
// before their first step, which creates the state.
int64_t state_bytes(const torch::optim::Optimizer& optimizer);

// How many tensors of a parameter's shape and dtype the optimizer `options` builds keeps per
// parameter once it has stepped: sgd and lars 1 (the momentum buffer; 0 without momentum),
// adamw and lamb 2 (the moments). state_bytes() is this x the parameters' bytes.
int64_t state_tensors_per_parameter(const OptimizerOptions& options);

}  // namespace dtrain::optim
