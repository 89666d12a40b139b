// trainer/kernel_warmup.h: the warm-up's training step and evaluation forwards leave the
// model as they found it (parameters, BatchNorm's statistics and step counts, no gradients,
// training mode), at the config's precision and memory format. On the CPU here, on the GPU
// where there is one.
#include "models/registry.h"
#include "trainer/kernel_warmup.h"

#include <catch2/catch.hpp>
#include <torch/cuda.h>

#include <memory>
#include <vector>

namespace {

using dtrain::models::Model;

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& tensor : tensors) out.push_back(tensor.detach().clone());
  return out;
}

bool equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("kernel warm-up leaves the model as it was", "[trainer]") {
  const bool cuda = torch::cuda::is_available();
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const bool channels_last = GENERATE(false, true);
  torch::manual_seed(3);
  dtrain::models::ModelOptions options;
  options.name = "resnet18";
  std::shared_ptr<Model> model = dtrain::models::make_model(options, {3, 16, 16}, 10);
  model->to(device);
  if (channels_last) {
    for (torch::Tensor& param : model->parameters()) {
      if (param.dim() == 4) param.set_data(param.contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  dtrain::trainer::Config config;
  config.data.batch_size = 4;
  config.train.channels_last = channels_last;
  config.train.precision = cuda ? "bf16" : "fp32";
  const auto params = copies(model->parameters());
  const auto buffers = copies(model->buffers());
  REQUIRE(buffers.size() > 0);  // BatchNorm's running statistics and step counts

  dtrain::trainer::warm_up_kernels(*model, config, {3, 16, 16}, {5, 2}, device);

  CHECK(equal(copies(model->parameters()), params));
  CHECK(equal(copies(model->buffers()), buffers));
  for (const torch::Tensor& param : model->parameters()) CHECK_FALSE(param.grad().defined());
  CHECK(model->is_training());
}
