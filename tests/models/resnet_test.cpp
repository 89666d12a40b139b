// ResNet-18/34/50 against torchvision: parameter counts, state-dict keys and shapes,
// initialisation, zero_init_residual, stems and output shapes.
#include "models/registry.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

using namespace dtrain::models;

namespace {

std::shared_ptr<Model> resnet(const std::string& name, const std::string& stem,
                              InputShape input = {3, 224, 224}, int64_t num_classes = 1000,
                              bool zero_init_residual = false) {
  ModelOptions options;
  options.name = name;
  options.stem = stem;
  options.zero_init_residual = zero_init_residual;
  return make_model(options, input, num_classes);
}

int64_t num_parameters(torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& param : module.parameters()) total += param.numel();
  return total;
}

std::set<std::string> state_dict_keys(torch::nn::Module& module) {
  std::set<std::string> keys;
  for (const auto& item : module.named_parameters()) keys.insert(item.key());
  for (const auto& item : module.named_buffers()) keys.insert(item.key());
  return keys;
}

// torchvision.models.resnet's state_dict() keys, written out from its source: conv1, bn1,
// layer{1..4}.{i}.{conv,bn}{1..2|3}, downsample.{0,1} on the first block of a stage whose
// stride or width changes, fc.
std::set<std::string> torchvision_keys(int depth) {
  const std::vector<int> blocks = depth == 18 ? std::vector<int>{2, 2, 2, 2}
                                              : std::vector<int>{3, 4, 6, 3};
  const int convs_per_block = depth == 50 ? 3 : 2;
  std::set<std::string> keys;
  auto add_bn = [&keys](const std::string& prefix) {
    for (const char* name : {"weight", "bias", "running_mean", "running_var",
                             "num_batches_tracked"}) {
      keys.insert(prefix + name);
    }
  };
  keys.insert("conv1.weight");
  add_bn("bn1.");
  for (int layer = 1; layer <= 4; ++layer) {
    for (int i = 0; i < blocks[layer - 1]; ++i) {
      const std::string prefix = fmt::format("layer{}.{}.", layer, i);
      for (int c = 1; c <= convs_per_block; ++c) {
        keys.insert(fmt::format("{}conv{}.weight", prefix, c));
        add_bn(fmt::format("{}bn{}.", prefix, c));
      }
      if (i == 0 && (layer > 1 || depth == 50)) {
        keys.insert(prefix + "downsample.0.weight");
        add_bn(prefix + "downsample.1.");
      }
    }
  }
  keys.insert("fc.weight");
  keys.insert("fc.bias");
  return keys;
}

torch::Tensor state_tensor(torch::nn::Module& module, const std::string& key) {
  // The dicts are held: find() points into them.
  const auto parameters = module.named_parameters();
  if (const auto* param = parameters.find(key)) return *param;
  const auto buffers = module.named_buffers();
  if (const auto* buffer = buffers.find(key)) return *buffer;
  FAIL("no tensor " << key);
  return {};
}

std::vector<int64_t> shape(torch::nn::Module& module, const std::string& key) {
  return state_tensor(module, key).sizes().vec();
}

}  // namespace

TEST_CASE("ResNet parameter counts equal torchvision's", "[models][resnet]") {
  // torchvision resnet18/34/50(num_classes=1000), 3 input channels.
  CHECK(num_parameters(*resnet("resnet18", "imagenet")) == 11689512);
  CHECK(num_parameters(*resnet("resnet34", "imagenet")) == 21797672);
  CHECK(num_parameters(*resnet("resnet50", "imagenet")) == 25557032);
}

TEST_CASE("ResNet state dict keys equal torchvision's", "[models][resnet]") {
  auto r18 = resnet("resnet18", "imagenet");
  const auto keys18 = state_dict_keys(*r18);
  CHECK(keys18.size() == 122);
  CHECK(keys18 == torchvision_keys(18));
  for (const char* key : {"conv1.weight", "bn1.running_var", "layer1.1.conv2.weight",
                          "layer2.0.downsample.0.weight", "layer4.1.bn2.num_batches_tracked",
                          "fc.bias"}) {
    CHECK(keys18.count(key) == 1);
  }
  CHECK(keys18.count("layer1.0.downsample.0.weight") == 0);
  CHECK(shape(*r18, "layer2.0.downsample.0.weight") == std::vector<int64_t>{128, 64, 1, 1});
  CHECK(shape(*r18, "fc.weight") == std::vector<int64_t>{1000, 512});
  CHECK(state_tensor(*r18, "layer4.1.bn2.num_batches_tracked").scalar_type() == torch::kLong);

  auto r34 = resnet("resnet34", "imagenet");
  CHECK(state_dict_keys(*r34) == torchvision_keys(34));

  auto r50 = resnet("resnet50", "imagenet");
  const auto keys50 = state_dict_keys(*r50);
  CHECK(keys50.size() == 320);
  CHECK(keys50 == torchvision_keys(50));
  for (const char* key : {"layer1.0.downsample.0.weight", "layer1.0.downsample.1.running_mean",
                          "layer3.5.conv3.weight", "layer4.2.bn3.num_batches_tracked"}) {
    CHECK(keys50.count(key) == 1);
  }
  CHECK(shape(*r50, "conv1.weight") == std::vector<int64_t>{64, 3, 7, 7});
  CHECK(shape(*r50, "layer1.0.downsample.0.weight") == std::vector<int64_t>{256, 64, 1, 1});
  CHECK(shape(*r50, "layer2.0.conv1.weight") == std::vector<int64_t>{128, 256, 1, 1});
  CHECK(shape(*r50, "layer2.0.conv2.weight") == std::vector<int64_t>{128, 128, 3, 3});
  CHECK(shape(*r50, "layer4.2.conv3.weight") == std::vector<int64_t>{2048, 512, 1, 1});
  CHECK(shape(*r50, "fc.weight") == std::vector<int64_t>{1000, 2048});
}

TEST_CASE("ResNet-50 strides on the 3x3 conv (v1.5)", "[models][resnet]") {
  auto r50 = resnet("resnet50", "imagenet");
  const auto modules = r50->named_modules();
  auto stride = [&modules](const std::string& name) {
    const auto stride = modules[name]->as<torch::nn::Conv2d>()->options.stride();
    return std::vector<int64_t>{(*stride)[0], (*stride)[1]};
  };
  CHECK(stride("layer2.0.conv1") == std::vector<int64_t>{1, 1});
  CHECK(stride("layer2.0.conv2") == std::vector<int64_t>{2, 2});
  CHECK(stride("layer2.0.downsample.0") == std::vector<int64_t>{2, 2});
  CHECK(stride("layer1.0.conv2") == std::vector<int64_t>{1, 1});
  CHECK(stride("conv1") == std::vector<int64_t>{2, 2});
}

TEST_CASE("ResNet initialisation follows torchvision", "[models][resnet]") {
  torch::manual_seed(0);
  for (bool zero_init : {false, true}) {
    for (const std::string name : {"resnet18", "resnet50"}) {
      auto model = resnet(name, "small", {3, 32, 32}, 10, zero_init);
      const std::string last_bn = name == "resnet50" ? ".bn3.weight" : ".bn2.weight";
      int zeroed = 0;
      for (const auto& item : model->named_parameters()) {
        const std::string& key = item.key();
        const bool bn_weight = key.find("bn") != std::string::npos ||
                               key.find("downsample.1.") != std::string::npos;
        if (!bn_weight || key.size() < 7 || key.substr(key.size() - 7) != ".weight") continue;
        const bool expect_zero = zero_init && key.rfind("layer", 0) == 0 &&
                                 key.size() > last_bn.size() &&
                                 key.substr(key.size() - last_bn.size()) == last_bn;
        INFO(name << " zero_init_residual=" << zero_init << " " << key);
        CHECK(torch::equal(item.value(), torch::full_like(item.value(), expect_zero ? 0.0 : 1.0)));
        zeroed += expect_zero ? 1 : 0;
      }
      // One zeroed gamma per block: 8 in ResNet-18, 16 in ResNet-50.
      CHECK(zeroed == (zero_init ? (name == "resnet50" ? 16 : 8) : 0));
      for (const auto& item : model->named_parameters()) {
        if (item.key().find(".bias") != std::string::npos && item.key() != "fc.bias") {
          CHECK(item.value().abs().max().item<double>() == 0.0);
        }
      }
    }
  }
  // Kaiming normal, fan_out, ReLU gain: std = sqrt(2 / (512 * 3 * 3)) = 0.020833.
  auto r18 = resnet("resnet18", "small", {3, 32, 32}, 10);
  const auto weight = state_tensor(*r18, "layer4.0.conv2.weight");
  CHECK(weight.std().item<double>() == Approx(std::sqrt(2.0 / 4608.0)).epsilon(0.01));
  CHECK(std::abs(weight.mean().item<double>()) < 1e-4);
  // nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
  const auto fc = state_tensor(*r18, "fc.weight");
  CHECK(fc.abs().max().item<double>() <= 1.0 / std::sqrt(512.0));
  CHECK(fc.abs().max().item<double>() > 0.9 / std::sqrt(512.0));
}

TEST_CASE("ResNet stems and output shapes", "[models][resnet]") {
  torch::manual_seed(0);
  SECTION("auto picks the small stem up to 64 px") {
    CHECK(shape(*resnet("resnet18", "auto", {1, 28, 28}, 10), "conv1.weight") ==
          std::vector<int64_t>{64, 1, 3, 3});
    CHECK(shape(*resnet("resnet18", "auto", {3, 64, 64}, 10), "conv1.weight") ==
          std::vector<int64_t>{64, 3, 3, 3});
    CHECK(shape(*resnet("resnet18", "auto", {3, 96, 96}, 10), "conv1.weight") ==
          std::vector<int64_t>{64, 3, 7, 7});
  }
  SECTION("resnet18, small stem, 1x28x28") {
    auto model = resnet("resnet18", "small", {1, 28, 28}, 10);
    CHECK(model->forward(torch::randn({2, 1, 28, 28})).sizes() == std::vector<int64_t>{2, 10});
  }
  SECTION("resnet34, small stem, 3x32x32") {
    auto model = resnet("resnet34", "small", {3, 32, 32}, 100);
    CHECK(model->forward(torch::randn({2, 3, 32, 32})).sizes() == std::vector<int64_t>{2, 100});
  }
  SECTION("resnet50, imagenet stem, 3x64x64, eval mode") {
    auto model = resnet("resnet50", "imagenet", {3, 64, 64}, 10);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto logits = model->forward(torch::randn({2, 3, 64, 64}));
    CHECK(logits.sizes() == std::vector<int64_t>{2, 10});
    CHECK(torch::isfinite(logits).all().item<bool>());
  }
  SECTION("resnet18 trains: every parameter gets a gradient, BN statistics move") {
    auto model = resnet("resnet18", "small", {3, 32, 32}, 10);
    const auto logits = model->forward(torch::randn({2, 3, 32, 32}));
    torch::nn::functional::cross_entropy(logits, torch::tensor({1, 7})).backward();
    for (const auto& item : model->named_parameters()) {
      INFO(item.key());
      REQUIRE(item.value().grad().defined());
    }
    CHECK(state_tensor(*model, "layer3.1.bn1.num_batches_tracked").item<int64_t>() == 1);
  }
}
