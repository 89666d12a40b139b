// SimpleCNN: a small VGG-style network for 28x28 and 32x32 images (Fashion-MNIST, CIFAR-10),
// cheap enough to reach 90% on Fashion-MNIST in a few CPU epochs.
#pragma once

#include "models/model.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::models {

namespace detail {
class ConvBlock;  // conv3x3 (bias-free), BatchNorm, ReLU
class Head;       // fc1, ReLU, fc2
}  // namespace detail

// Shapes for width w on [N, C, H, W] images (H, W >= 8):
//   block1: conv3x3(C -> w)   BN ReLU, max-pool 2   [N, w,  H/2, W/2]
//   block2: conv3x3(w -> 2w)  BN ReLU, max-pool 2   [N, 2w, H/4, W/4]
//   block3: conv3x3(2w -> 2w) BN ReLU               [N, 2w, H/4, W/4]
//   adaptive average pool to 3x3, flatten            [N, 18w]
//   head:   fc1(18w -> 128) ReLU, fc2(128 -> classes)
// The 3x3 pool keeps coarse spatial layout (which a global pool would lose) while making the
// head independent of the input size. About 131k parameters at w = 32 and 10 classes.
class SimpleCNN : public Model {
 public:
  SimpleCNN(int64_t in_channels, int64_t width, int64_t num_classes);

  torch::Tensor forward(torch::Tensor images) override;
  // "block1.", "block2.", "block3.", "head.".
  std::vector<Unit> units() override;

 private:
  std::vector<std::shared_ptr<detail::ConvBlock>> blocks_;  // block1..block3
  std::shared_ptr<detail::Head> head_;
};

}  // namespace dtrain::models
