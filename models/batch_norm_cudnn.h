// BatchNorm's training step on cuDNN for bf16 activations in channels_last, which ATen never
// sends to cuDNN (it does for fp16): ATen's own channels_last kernels took 12.6 ms of
// ResNet-50's 28.4 ms bf16 step on an H200, cuDNN's 7.0 ms for the same layers in fp16
// (docs/PERFORMANCE.md, "BatchNorm in bf16 on cuDNN"). Defined only where cudnn.h is found
// (DTRAIN_CUDNN=1).
#pragma once

#include <torch/torch.h>

namespace dtrain::models::cudnn_bf16 {

// Whether batch_norm_training() takes this input: a 4-d bf16 CUDA tensor with fp32 parameters,
// every tensor 16-byte aligned, cuDNN enabled, an eps cuDNN accepts.
bool accepts(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
             const torch::Tensor& running_mean, const torch::Tensor& running_var, double eps);

// torch::batch_norm(..., training = true, ...) on cuDNN's persistent NHWC kernels: normalises
// with the batch's statistics, updates running_mean and running_var in place, and is
// differentiable in input, weight and bias. The output is channels_last. A backward that takes
// a request of common/shared_kernels.h runs on ATen's kernels instead, beside communication.
torch::Tensor batch_norm_training(const torch::Tensor& input, const torch::Tensor& weight,
                                  const torch::Tensor& bias, const torch::Tensor& running_mean,
                                  const torch::Tensor& running_var, double momentum, double eps);

}  // namespace dtrain::models::cudnn_bf16
