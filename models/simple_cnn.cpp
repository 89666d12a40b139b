#include "models/simple_cnn.h"

#include "models/batch_norm.h"

#include <fmt/format.h>

namespace dtrain::models {

namespace nn = torch::nn;

namespace detail {

class ConvBlock : public nn::Module {
 public:
  ConvBlock(int64_t in_channels, int64_t out_channels) {
    conv_ = register_module(
        "conv", nn::Conv2d(nn::Conv2dOptions(in_channels, out_channels, 3).padding(1).bias(false)));
    bn_ = register_module("bn", BatchNorm(out_channels));
    torch::NoGradGuard no_grad;
    nn::init::kaiming_normal_(conv_->weight, 0.0, torch::kFanOut, torch::kReLU);
  }

  torch::Tensor forward(const torch::Tensor& x) { return bn_(conv_(x)).relu_(); }

 private:
  nn::Conv2d conv_{nullptr};
  BatchNorm bn_{nullptr};
};

class Head : public nn::Module {
 public:
  static constexpr int64_t kHidden = 128;

  Head(int64_t in_features, int64_t num_classes) {
    fc1_ = register_module("fc1", nn::Linear(in_features, kHidden));
    fc2_ = register_module("fc2", nn::Linear(kHidden, num_classes));
  }

  torch::Tensor forward(const torch::Tensor& x) { return fc2_(fc1_(x).relu_()); }

 private:
  nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

}  // namespace detail

namespace {
constexpr int64_t kPooledSize = 3;  // the adaptive pool's output, kPooledSize x kPooledSize
}  // namespace

SimpleCNN::SimpleCNN(int64_t in_channels, int64_t width, int64_t num_classes) {
  const int64_t channels[] = {in_channels, width, 2 * width, 2 * width};
  for (int i = 0; i < 3; ++i) {
    blocks_.push_back(register_module(fmt::format("block{}", i + 1),
                                      std::make_shared<detail::ConvBlock>(channels[i],
                                                                          channels[i + 1])));
  }
  head_ = register_module(
      "head", std::make_shared<detail::Head>(2 * width * kPooledSize * kPooledSize, num_classes));
}

// Units in units()'s order: block1..block3, head.
torch::Tensor SimpleCNN::forward(torch::Tensor images) {
  auto block = [this](int64_t i, const torch::Tensor& x) {
    return run_unit(i, x, [this, i](const torch::Tensor& t) { return blocks_[i]->forward(t); });
  };
  auto x = torch::max_pool2d(block(0, images), 2);  // [N, w, H/2, W/2]
  x = torch::max_pool2d(block(1, x), 2);            // [N, 2w, H/4, W/4]
  x = block(2, x);                                  // [N, 2w, H/4, W/4]
  x = torch::adaptive_avg_pool2d(x, {kPooledSize, kPooledSize}).flatten(1);  // [N, 18w]
  return run_unit(3, x, [this](const torch::Tensor& t) { return head_->forward(t); });
}

std::vector<Unit> SimpleCNN::units() {
  std::vector<Unit> units;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    units.push_back({fmt::format("block{}.", i + 1), blocks_[i].get()});
  }
  units.push_back({"head.", head_.get()});
  return units;
}

}  // namespace dtrain::models
