#include "trainer/kernel_warmup.h"

#include "trainer/precision.h"

namespace dtrain::trainer {

namespace {

torch::Tensor zeros_batch(int64_t n, const std::vector<int64_t>& image_shape, const Config& config,
                          torch::Device device) {
  std::vector<int64_t> sizes = {n};
  sizes.insert(sizes.end(), image_shape.begin(), image_shape.end());
  torch::Tensor images = torch::zeros(sizes, torch::TensorOptions().device(device));
  // As the loader gives them: cuDNN picks its algorithms per shape and memory format.
  if (config.train.channels_last) images = images.contiguous(torch::MemoryFormat::ChannelsLast);
  return images;
}

}  // namespace

void warm_up_kernels(models::Model& model, const Config& config, std::vector<int64_t> image_shape,
                     const std::vector<int64_t>& eval_batches, torch::Device device) {
  std::vector<torch::Tensor> buffers;  // BatchNorm's statistics, which a training forward moves
  for (const torch::Tensor& buffer : model.buffers()) buffers.push_back(buffer.clone());

  model.train();
  {
    const int64_t n = config.data.batch_size;
    torch::Tensor loss;
    {
      AutocastScope autocast(config.train.precision);
      loss = torch::nn::functional::cross_entropy(
          model.forward(zeros_batch(n, image_shape, config, device)),
          torch::zeros({n}, torch::TensorOptions().dtype(torch::kLong).device(device)),
          torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(
              config.train.label_smoothing));
    }
    loss.backward();
  }
  model.eval();
  {
    torch::NoGradGuard no_grad;
    for (const int64_t n : eval_batches) {
      AutocastScope autocast(config.train.precision);
      model.forward(zeros_batch(n, image_shape, config, device));
    }
  }
  model.train();

  torch::NoGradGuard no_grad;
  for (torch::Tensor& param : model.parameters()) param.mutable_grad().reset();
  size_t i = 0;
  for (torch::Tensor& buffer : model.buffers()) buffer.copy_(buffers[i++]);
  if (device.is_cuda()) torch::cuda::synchronize();
}

}  // namespace dtrain::trainer
