// Bytes of optimizer state an optimizer holds (momentum, Adam moments), for the memory metrics
// that show what sharding the state saves.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace dtrain::optim {

// Sums the state tensors of the optimizers make_optimizer builds (SGD, AdamW, LARS, LAMB); 0
// before their first step, which creates the state.
int64_t state_bytes(const torch::optim::Optimizer& optimizer);

}  // namespace dtrain::optim
