// models::BatchNorm's replaceable training forward (as SyncBatchNorm uses it): called with the
// layer's own tensors and options in training only, the batches still counted, cleared by an
// empty function; set_batchnorm_training_forward reaches every BatchNorm of a model; and on a
// GPU, bf16 inputs take cuDNN's kernel (which ATen does not choose for them), or ATen's for a
// backward beside an all-reduce.
#include "common/shared_kernels.h"
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

TEST_CASE("bf16 BatchNorm on a GPU runs cuDNN's kernels and agrees with ATen's (skipped on CPU)",
          "[models][batch_norm]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  const torch::Device cuda(torch::kCUDA, 0);
  const BatchNormOptions options{16, /*eps=*/1e-5, /*momentum=*/0.1};
  BatchNorm ours(options);
  ours->to(cuda);
  torch::manual_seed(3);
  {
    torch::NoGradGuard no_grad;
    ours->weight.copy_(torch::rand({16}) + 0.5);
    ours->bias.copy_(torch::randn({16}));
  }
  const torch::Tensor weight = ours->weight.detach().clone().requires_grad_();
  const torch::Tensor bias = ours->bias.detach().clone().requires_grad_();
  const torch::Tensor running_mean = ours->running_mean.clone();
  const torch::Tensor running_var = ours->running_var.clone();
  const torch::Tensor x = (torch::randn({8, 16, 12, 12}, cuda) * 3 + 1)
                              .to(torch::kBFloat16)
                              .contiguous(torch::MemoryFormat::ChannelsLast);
  const torch::Tensor upstream = torch::randn_like(x);

  const torch::Tensor x_ours = x.clone().requires_grad_();
  const torch::Tensor y_ours = ours(x_ours);
  REQUIRE(y_ours.grad_fn());
  INFO("backward node " << y_ours.grad_fn()->name());
#if DTRAIN_CUDNN
  CHECK(y_ours.grad_fn()->name().find("CudnnBf16BatchNorm") != std::string::npos);
#else
  CHECK(y_ours.grad_fn()->name() == "NativeBatchNormBackward0");
#endif
  // A backward beside an all-reduce (common/shared_kernels.h) takes ATen's kernels from
  // cuDNN's saved statistics: the same gradients.
  const bool shared = GENERATE(false, true);
  CAPTURE(shared);
  dtrain::clear_shared_kernel_requests();
  if (shared) dtrain::request_shared_kernels(1);
  y_ours.backward(upstream);
#if DTRAIN_CUDNN
  CHECK_FALSE(dtrain::take_shared_kernel_request());  // taken by the backward, if made
#endif
  dtrain::clear_shared_kernel_requests();

  // ATen's own kernel for bf16 (cudnn_enabled has no effect on it: it never takes cuDNN).
  const torch::Tensor x_aten = x.clone().requires_grad_();
  const torch::Tensor y_aten = torch::batch_norm(x_aten, weight, bias, running_mean, running_var,
                                                 /*training=*/true, 0.1, 1e-5, false);
  y_aten.backward(upstream);

  CHECK(y_ours.scalar_type() == torch::kBFloat16);
  CHECK(y_ours.is_contiguous(torch::MemoryFormat::ChannelsLast));
  const auto close = [](const torch::Tensor& a, const torch::Tensor& b, double tolerance) {
    return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() <=
           tolerance * (1.0 + b.to(torch::kFloat64).abs().max().item<double>());
  };
  CHECK(close(y_ours, y_aten, 1e-2));  // bf16 keeps 8 bits: its rounding is 4e-3
  CHECK(close(x_ours.grad(), x_aten.grad(), 1e-2));
  CHECK(close(ours->weight.grad(), weight.grad(), 5e-3));  // sums of 1,152 bf16 products
  CHECK(close(ours->bias.grad(), bias.grad(), 5e-3));
  CHECK(close(ours->running_mean, running_mean, 1e-4));
  CHECK(close(ours->running_var, running_var, 1e-4));

  ours->eval();
  const torch::Tensor y_eval = ours(x);
  CHECK(close(y_eval, torch::batch_norm(x, ours->weight, ours->bias, ours->running_mean,
                                        ours->running_var, false, 0.1, 1e-5, false),
              1e-2));
}

namespace {

// A bf16 channels_last batch of 16 channels on `cuda`, as ResNet's BatchNorms take in bf16.
torch::Tensor bf16_channels_last_input(const torch::Device& cuda) {
  return torch::randn({8, 16, 12, 12}, cuda)
      .to(torch::kBFloat16)
      .contiguous(torch::MemoryFormat::ChannelsLast)
      .requires_grad_();
}

}  // namespace

TEST_CASE("beside standing communication, bf16 BatchNorm takes ATen's kernels (skipped on CPU)",
          "[models][batch_norm]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  const torch::Device cuda(torch::kCUDA, 0);
  BatchNorm norm(BatchNormOptions{16, /*eps=*/1e-5, /*momentum=*/0.1});
  norm->to(cuda);
  const torch::Tensor x = bf16_channels_last_input(cuda);
  dtrain::set_standing_communication(true);  // as the p2p parameter server sets it on GPUs
  const torch::Tensor beside = norm(x);
  dtrain::set_standing_communication(false);
  const torch::Tensor alone = norm(x);
  REQUIRE(beside.grad_fn());
  REQUIRE(alone.grad_fn());
  CHECK(beside.grad_fn()->name() == "NativeBatchNormBackward0");
#if DTRAIN_CUDNN
  CHECK(alone.grad_fn()->name().find("CudnnBf16BatchNorm") != std::string::npos);
#endif
}

TEST_CASE("bf16 BatchNorm whose parameters start 8 bytes off takes ATen's kernels (skipped on "
          "CPU)",
          "[models][batch_norm]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  const torch::Device cuda(torch::kCUDA, 0);
  BatchNorm norm(BatchNormOptions{16, /*eps=*/1e-5, /*momentum=*/0.1});
  norm->to(cuda);
  // As the parameter server's buckets hold them: views into one flat buffer, here 2 floats in.
  const torch::Tensor flat = torch::zeros({2 + 16}, torch::TensorOptions().device(cuda));
  {
    torch::NoGradGuard no_grad;
    flat.narrow(0, 2, 16).copy_(norm->weight);
    norm->weight.set_(flat.storage(), 2, {16}, {1});
  }
  const torch::Tensor x = bf16_channels_last_input(cuda);
  const torch::Tensor y = norm(x);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "NativeBatchNormBackward0");
  y.sum().backward();
  torch::cuda::synchronize();  // a misaligned load would fail here
}
