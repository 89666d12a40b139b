// ResNet-18/34/50 (He et al. 2016, "Deep Residual Learning") with torchvision's architecture,
// initialisation and parameter/buffer names, so that a state dict saved by models/export.h
// loads into torchvision.models.resnet{18,34,50}(num_classes=...) with strict=True.
#pragma once

#include "models/batch_norm.h"
#include "models/model.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::models {

struct ResNetConfig {
  int depth = 18;  // 18, 34 or 50
  int64_t in_channels = 3;
  int64_t num_classes = 1000;
  // true: 3x3/1 conv, no max-pool (28-64 px inputs); false: torchvision's 7x7/2 conv + 3x3/2 pool.
  bool small_stem = false;
  // Zero the last BatchNorm gamma of every block, so each block starts as the identity
  // (Goyal et al. 2017, "Accurate, Large Minibatch SGD", section 5.1).
  bool zero_init_residual = false;
};

// A residual block: BasicBlock (two 3x3 convs, ResNet-18/34) or Bottleneck (1x1, 3x3, 1x1,
// expansion 4, ResNet-50; the stride sits on the 3x3 conv as in torchvision's "v1.5").
class ResidualBlock : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // The BatchNorm on the residual branch's output: bn2 (BasicBlock) or bn3 (Bottleneck).
  virtual BatchNorm last_bn() = 0;
};

class ResNet : public Model {
 public:
  // Throws UserError for a depth other than 18, 34 or 50.
  explicit ResNet(const ResNetConfig& config);

  // images: [N, in_channels, H, W] -> logits [N, num_classes]; any H, W >= 1 (global pool).
  torch::Tensor forward(torch::Tensor images) override;
  // "conv1.", "bn1.", then "layer1.0." ... "layer4.{n-1}.", then "fc.".
  std::vector<Unit> units() override;

 private:
  void initialise(bool zero_init_residual);

  bool small_stem_;
  torch::nn::Conv2d conv1_{nullptr};
  BatchNorm bn1_{nullptr};
  // Every block in forward order, with its name prefix ("layer2.1.").
  std::vector<std::pair<std::string, std::shared_ptr<ResidualBlock>>> blocks_;
  torch::nn::Linear fc_{nullptr};
};

}  // namespace dtrain::models
