// The model contract: a torch module whose forward maps images to logits, and which lists
// its ordered units (stem, blocks, head) so that ZeRO-3 can gather parameters unit by unit.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace dtrain::models {

// One unit of the forward pass, in execution order. `prefix` is the unit's name prefix in the
// model's named_parameters() / named_buffers(), ending in '.' (e.g. "layer2.1."): for every
// (name, tensor) of module->named_parameters() and module->named_buffers(), the model holds the
// same tensor as prefix + name. `module` is owned by the model and lives as long as it does.
// A stem made of sibling modules is listed as one unit each (ResNet: "conv1.", then "bn1.").
struct Unit {
  std::string prefix;
  torch::nn::Module* module;
};

class Model : public torch::nn::Module {
 public:
  // images: [N, C, H, W] float; returns logits [N, num_classes].
  virtual torch::Tensor forward(torch::Tensor images) = 0;
  // Units in forward order; together they own every parameter and buffer exactly once.
  virtual std::vector<Unit> units() = 0;
};

}  // namespace dtrain::models
