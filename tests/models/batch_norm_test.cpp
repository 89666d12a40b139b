// models::BatchNorm's replaceable training forward (as SyncBatchNorm uses it): called with the
// layer's own tensors and options in training only, the batches still counted, cleared by an
// empty function; and set_batchnorm_training_forward reaches every BatchNorm of a model.
#include "models/batch_norm.h"
#include "models/registry.h"

#include <catch2/catch.hpp>

#include <string>

using namespace dtrain::models;

TEST_CASE("a BatchNorm's training forward can be replaced", "[models][batch_norm]") {
  const BatchNormOptions options{3, /*eps=*/1e-3, /*momentum=*/0.2};
  BatchNorm norm(options);
  BatchNorm plain(options);
  int calls = 0;
  const dtrain::BatchNormForward doubled =
      [&](const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
          const torch::Tensor& running_mean, const torch::Tensor& running_var, double momentum,
          double eps) {
        ++calls;
        CHECK(weight.is_same(norm->weight));
        CHECK(bias.is_same(norm->bias));
        CHECK(running_mean.is_same(norm->running_mean));
        CHECK(running_var.is_same(norm->running_var));
        CHECK(momentum == 0.2);
        CHECK(eps == 1e-3);
        return input * 2;
      };
  REQUIRE(set_batchnorm_training_forward(*norm, doubled) == 1);
  const torch::Tensor x = torch::randn({4, 3, 2, 2});

  CHECK(torch::equal(norm(x), x * 2));
  CHECK(calls == 1);
  CHECK(norm->num_batches_tracked.item<int64_t>() == 1);

  norm->eval();
  plain->eval();
  CHECK(torch::equal(norm(x), plain(x)));
  CHECK(calls == 1);

  norm->train();
  plain->train();
  REQUIRE(set_batchnorm_training_forward(*norm, {}) == 1);
  CHECK(torch::equal(norm(x), plain(x)));
  CHECK(torch::equal(norm->running_mean, plain->running_mean));
  CHECK(calls == 1);
  CHECK(norm->num_batches_tracked.item<int64_t>() == 2);
}

TEST_CASE("set_batchnorm_training_forward reaches every BatchNorm", "[models][batch_norm]") {
  for (const std::string name : {"simple_cnn", "resnet18", "resnet50"}) {
    INFO(name);
    ModelOptions options;
    options.name = name;
    auto model = make_model(options, {3, 32, 32}, 10);
    int64_t layers = 0;
    for (const auto& item : model->named_buffers()) {
      const std::string suffix = "running_mean";
      const std::string& key = item.key();
      layers += key.size() >= suffix.size() &&
                key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
    }
    CHECK(layers == (name == "simple_cnn" ? 3 : name == "resnet18" ? 20 : 53));
    CHECK(set_batchnorm_training_forward(*model, [](const torch::Tensor& input, auto&&...) {
            return input;
          }) == layers);
  }
}
