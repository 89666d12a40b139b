// The training forward of a BatchNorm layer as a function on tensors: the type by which a
// models::BatchNorm takes a replacement (dist::sync_batchnorm_forward) without either side
// depending on the other.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace dtrain {

// input [N, C, ...]; weight, bias, running_mean, running_var [C]. Returns the normalised input
// and updates running_mean and running_var in place (momentum and eps as torch::batch_norm's).
using BatchNormForward = std::function<torch::Tensor(
    const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
    const torch::Tensor& running_mean, const torch::Tensor& running_var, double momentum,
    double eps)>;

}  // namespace dtrain
