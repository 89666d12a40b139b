// The registry: SimpleCNN shapes and size, option and input errors, and the units() contract
// (every parameter and buffer in exactly one unit) for every model.
#include "models/registry.h"

#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

using namespace dtrain::models;

namespace {

ModelOptions named(const std::string& name) {
  ModelOptions options;
  options.name = name;
  return options;
}

std::string user_error(const std::function<void()>& action) {
  try {
    action();
  } catch (const dtrain::UserError& e) {
    return e.what();
  }
  FAIL("expected a dtrain::UserError");
  return {};
}

}  // namespace

TEST_CASE("model_names lists every model", "[models][registry]") {
  CHECK(model_names() == std::vector<std::string>{"simple_cnn", "resnet18", "resnet34",
                                                  "resnet50"});
}

TEST_CASE("SimpleCNN output shapes and size", "[models][simple_cnn]") {
  torch::manual_seed(0);
  auto fmnist = make_model(named("simple_cnn"), {1, 28, 28}, 10);
  // convs 1*32*9 + 32*64*9 + 64*64*9, three BNs 2*(32+64+64), fc1 576*128+128, fc2 128*10+10.
  int64_t total = 0;
  for (const auto& param : fmnist->parameters()) total += param.numel();
  CHECK(total == 288 + 18432 + 36864 + 320 + 73856 + 1290);
  CHECK(fmnist->forward(torch::randn({2, 1, 28, 28})).sizes() == std::vector<int64_t>{2, 10});

  auto cifar = make_model(named("simple_cnn"), {3, 32, 32}, 10);
  CHECK(cifar->forward(torch::randn({2, 3, 32, 32})).sizes() == std::vector<int64_t>{2, 10});

  auto options = named("simple_cnn");
  options.width = 8;
  options.num_classes = 12;  // a head wider than the dataset's 10
  auto tiny = make_model(options, {3, 8, 13}, 10);
  CHECK(tiny->forward(torch::randn({2, 3, 8, 13})).sizes() == std::vector<int64_t>{2, 12});

  SECTION("every parameter gets a gradient") {
    torch::nn::functional::cross_entropy(fmnist->forward(torch::randn({4, 1, 28, 28})),
                                         torch::tensor({0, 1, 2, 3}))
        .backward();
    for (const auto& item : fmnist->named_parameters()) {
      INFO(item.key());
      CHECK(item.value().grad().defined());
    }
  }
}

TEST_CASE("models are reproducible from the torch seed", "[models][registry]") {
  for (const auto& name : {"simple_cnn", "resnet18"}) {
    torch::manual_seed(42);
    auto a = make_model(named(name), {1, 28, 28}, 10);
    torch::manual_seed(42);
    auto b = make_model(named(name), {1, 28, 28}, 10);
    const auto pa = a->parameters();
    const auto pb = b->parameters();
    REQUIRE(pa.size() == pb.size());
    for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
  }
}

TEST_CASE("units cover every parameter and buffer exactly once, in order", "[models][units]") {
  const std::map<std::string, std::vector<std::string>> expected_ends = {
      {"simple_cnn", {"block1.", "head."}},
      {"resnet18", {"conv1.", "fc."}},
      {"resnet34", {"conv1.", "fc."}},
      {"resnet50", {"conv1.", "fc."}}};
  const std::map<std::string, size_t> expected_units = {
      {"simple_cnn", 4}, {"resnet18", 11}, {"resnet34", 19}, {"resnet50", 19}};
  for (const auto& name : model_names()) {
    INFO(name);
    auto model = make_model(named(name), {3, 32, 32}, 10);
    std::map<std::string, int> seen;
    for (const auto& item : model->named_parameters()) seen[item.key()] = 0;
    for (const auto& item : model->named_buffers()) seen[item.key()] = 0;

    const auto units = model->units();
    REQUIRE(units.size() == expected_units.at(name));
    CHECK(units.front().prefix == expected_ends.at(name).front());
    CHECK(units.back().prefix == expected_ends.at(name).back());
    for (const auto& unit : units) {
      REQUIRE(unit.module != nullptr);
      size_t tensors = 0;
      for (const auto& item : unit.module->named_parameters()) {
        INFO(unit.prefix << item.key());
        REQUIRE(seen.count(unit.prefix + item.key()) == 1);
        CHECK(model->named_parameters()[unit.prefix + item.key()].is_same(item.value()));
        ++seen[unit.prefix + item.key()];
        ++tensors;
      }
      for (const auto& item : unit.module->named_buffers()) {
        INFO(unit.prefix << item.key());
        REQUIRE(seen.count(unit.prefix + item.key()) == 1);
        ++seen[unit.prefix + item.key()];
        ++tensors;
      }
      CHECK(tensors > 0);
    }
    for (const auto& [key, count] : seen) {
      INFO(key);
      CHECK(count == 1);
    }
  }
  auto r50 = make_model(named("resnet50"), {3, 32, 32}, 10);
  std::vector<std::string> prefixes;
  for (const auto& unit : r50->units()) prefixes.push_back(unit.prefix);
  CHECK(prefixes == std::vector<std::string>{
                        "conv1.", "bn1.", "layer1.0.", "layer1.1.", "layer1.2.", "layer2.0.",
                        "layer2.1.", "layer2.2.", "layer2.3.", "layer3.0.", "layer3.1.",
                        "layer3.2.", "layer3.3.", "layer3.4.", "layer3.5.", "layer4.0.",
                        "layer4.1.", "layer4.2.", "fc."});
}

TEST_CASE("bad model options are reported as field errors", "[models][registry]") {
  CHECK(ModelOptions{}.validate().empty());
  ModelOptions options;
  options.name = "vgg16";
  options.num_classes = -1;
  options.stem = "tiny";
  options.width = 0;
  std::vector<std::string> keys;
  for (const auto& error : options.validate()) keys.push_back(error.key);
  CHECK(keys == std::vector<std::string>{"name", "num_classes", "stem", "width"});

  const std::string message = user_error([&] { make_model(options, {1, 28, 28}, 10); });
  CHECK_THAT(message, Catch::Matchers::Contains("model.name") &&
                          Catch::Matchers::Contains("vgg16") &&
                          Catch::Matchers::Contains("model.width"));
}

TEST_CASE("bad inputs and class counts are user errors", "[models][registry]") {
  CHECK_THAT(user_error([] { make_model(named("simple_cnn"), {1, 4, 28}, 10); }),
             Catch::Matchers::Contains("1x4x28"));
  CHECK_THAT(user_error([] { make_model(named("resnet18"), {0, 32, 32}, 10); }),
             Catch::Matchers::Contains("channel"));
  CHECK_THAT(user_error([] { make_model(named("resnet18"), {3, 32, 32}, 0); }),
             Catch::Matchers::Contains("num_classes"));
  auto narrow = named("simple_cnn");
  narrow.num_classes = 5;  // labels 5-9 would be past the head
  CHECK_THAT(user_error([&] { make_model(narrow, {1, 28, 28}, 10); }),
             Catch::Matchers::Contains("model.num_classes = 5 is fewer than the dataset's 10") &&
                 Catch::Matchers::Contains("set it to 10 or more"));
}
