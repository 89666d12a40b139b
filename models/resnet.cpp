#include "models/resnet.h"

#include "common/error.h"

#include <fmt/format.h>

#include <string>
#include <utility>

namespace dtrain::models {
namespace {

namespace nn = torch::nn;

// Bias-free (BatchNorm follows every conv); padding kernel/2 keeps H/stride like torchvision's
// conv1x1, conv3x3 and the 7x7 stem.
nn::Conv2d conv(int64_t in_planes, int64_t out_planes, int64_t kernel, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in_planes, out_planes, kernel)
                        .stride(stride)
                        .padding(kernel / 2)
                        .bias(false));
}

// torchvision's `downsample`: Sequential(conv1x1 with the block's stride, BatchNorm), so its
// tensors are named downsample.0.weight and downsample.1.{weight,bias,running_*,...}.
nn::Sequential downsample(int64_t in_planes, int64_t out_planes, int64_t stride) {
  return nn::Sequential(conv(in_planes, out_planes, 1, stride), BatchNorm(out_planes));
}

// Adds the shortcut to the residual branch and applies the block's last ReLU, in place as in
// torchvision (BatchNorm's backward does not need its output).
torch::Tensor merge(torch::Tensor out, const torch::Tensor& x, nn::Sequential& shortcut) {
  out += shortcut ? shortcut->forward(x) : x;
  return out.relu_();
}

class BasicBlock : public ResidualBlock {
 public:
  static constexpr int64_t kExpansion = 1;

  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride) {
    conv1_ = register_module("conv1", conv(in_planes, planes, 3, stride));
    bn1_ = register_module("bn1", BatchNorm(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, 1));
    bn2_ = register_module("bn2", BatchNorm(planes));
    if (stride != 1 || in_planes != planes) {
      downsample_ = register_module("downsample", downsample(in_planes, planes, stride));
    }
  }

  torch::Tensor forward(torch::Tensor x) override {
    auto out = bn1_(conv1_(x)).relu_();
    return merge(bn2_(conv2_(out)), x, downsample_);
  }

  BatchNorm last_bn() override { return bn2_; }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  BatchNorm bn1_{nullptr}, bn2_{nullptr};
  nn::Sequential downsample_{nullptr};
};

class Bottleneck : public ResidualBlock {
 public:
  static constexpr int64_t kExpansion = 4;

  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride) {
    const int64_t out_planes = planes * kExpansion;
    conv1_ = register_module("conv1", conv(in_planes, planes, 1, 1));
    bn1_ = register_module("bn1", BatchNorm(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, stride));  // v1.5: stride here
    bn2_ = register_module("bn2", BatchNorm(planes));
    conv3_ = register_module("conv3", conv(planes, out_planes, 1, 1));
    bn3_ = register_module("bn3", BatchNorm(out_planes));
    if (stride != 1 || in_planes != out_planes) {
      downsample_ = register_module("downsample", downsample(in_planes, out_planes, stride));
    }
  }

  torch::Tensor forward(torch::Tensor x) override {
    auto out = bn1_(conv1_(x)).relu_();
    out = bn2_(conv2_(out)).relu_();
    return merge(bn3_(conv3_(out)), x, downsample_);
  }

  BatchNorm last_bn() override { return bn3_; }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  BatchNorm bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential downsample_{nullptr};
};

// Blocks per stage, as in torchvision's resnet18/34/50.
std::vector<int> blocks_per_layer(int depth) {
  switch (depth) {
    case 18: return {2, 2, 2, 2};
    case 34:
    case 50: return {3, 4, 6, 3};
    default:
      throw UserError(fmt::format("ResNet depth {} is not supported; use 18, 34 or 50", depth));
  }
}

}  // namespace

ResNet::ResNet(const ResNetConfig& config) : small_stem_(config.small_stem) {
  const std::vector<int> num_blocks = blocks_per_layer(config.depth);
  const bool bottleneck = config.depth >= 50;
  const int64_t expansion = bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;

  conv1_ = register_module("conv1", small_stem_ ? conv(config.in_channels, 64, 3, 1)
                                                : conv(config.in_channels, 64, 7, 2));
  bn1_ = register_module("bn1", BatchNorm(64));
  int64_t in_planes = 64;
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t planes = int64_t{64} << layer;  // 64, 128, 256, 512
    auto blocks = register_module(fmt::format("layer{}", layer + 1), nn::ModuleList());
    for (int i = 0; i < num_blocks[layer]; ++i) {
      const int64_t stride = (layer > 0 && i == 0) ? 2 : 1;
      std::shared_ptr<ResidualBlock> block;
      if (bottleneck) {
        block = std::make_shared<Bottleneck>(in_planes, planes, stride);
      } else {
        block = std::make_shared<BasicBlock>(in_planes, planes, stride);
      }
      blocks->push_back(block);  // registered as "<i>"
      blocks_.emplace_back(fmt::format("layer{}.{}.", layer + 1, i), block);
      in_planes = planes * expansion;
    }
  }
  fc_ = register_module("fc", nn::Linear(512 * expansion, config.num_classes));
  initialise(config.zero_init_residual);
}

// torchvision's init: Kaiming-normal (fan_out, ReLU gain) convs, BatchNorm gamma 1 and beta 0;
// the Linear keeps its default init, which matches PyTorch's nn.Linear.
void ResNet::initialise(bool zero_init_residual) {
  torch::NoGradGuard no_grad;
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<BatchNormImpl>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
  if (zero_init_residual) {
    for (auto& entry : blocks_) nn::init::zeros_(entry.second->last_bn()->weight);
  }
}

// Units in units()'s order. The stem's ReLU runs inside bn1's unit: in place on the unit's
// output outside it, it would move the output's history from under the unit's backward hook.
torch::Tensor ResNet::forward(torch::Tensor images) {
  int64_t unit = 0;
  auto x = run_unit(unit++, images, [this](const torch::Tensor& t) { return conv1_(t); });
  x = run_unit(unit++, x, [this](const torch::Tensor& t) { return bn1_(t).relu_(); });
  if (!small_stem_) x = torch::max_pool2d(x, /*kernel_size=*/3, /*stride=*/2, /*padding=*/1);
  for (auto& entry : blocks_) {
    ResidualBlock& block = *entry.second;
    x = run_unit(unit++, x, [&block](const torch::Tensor& t) { return block.forward(t); });
  }
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);  // [N, 512 * expansion]
  return run_unit(unit, x, [this](const torch::Tensor& t) { return fc_(t); });
}

std::vector<Unit> ResNet::units() {
  std::vector<Unit> units = {{"conv1.", conv1_.get()}, {"bn1.", bn1_.get()}};
  for (auto& entry : blocks_) units.push_back({entry.first, entry.second.get()});
  units.push_back({"fc.", fc_.get()});
  return units;
}

}  // namespace dtrain::models
