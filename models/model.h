// The model contract: a torch module whose forward maps images to logits, and which lists
// its ordered units (stem, blocks, head) and runs each through UnitModule::run_unit, so that a
// strategy's UnitHooks (common/units.h) can gather a unit's parameters before it runs.
#pragma once

#include "common/units.h"

#include <torch/torch.h>

namespace dtrain::models {

using Unit = dtrain::Unit;

class Model : public UnitModule {
 public:
  // images: [N, C, H, W] float; returns logits [N, num_classes].
  virtual torch::Tensor forward(torch::Tensor images) = 0;
};

}  // namespace dtrain::models
