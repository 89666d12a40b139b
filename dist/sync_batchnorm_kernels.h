// The five steps of SyncBatchNorm, as PyTorch's SyncBatchNorm splits them around its two
// collectives. On CUDA tensors they are ATen's fused kernels (one pass each, channels_last and
// bf16/fp16 inputs with fp32 parameters included); elsewhere the same arithmetic as tensor
// operations, since those kernels are CUDA-only. Statistics are in fp32 at least.
#pragma once

#include <torch/torch.h>

#include <tuple>

namespace dtrain::dist::sync_bn {

// This rank's per-channel mean and 1 / sqrt(biased variance + eps).
std::tuple<torch::Tensor, torch::Tensor> local_stats(const torch::Tensor& input, double eps);

// The global mean and invstd from every rank's ([ranks, C] means and invstds, [ranks] element
// counts), merged pairwise-stably; updates the running statistics (unbiased variance).
std::tuple<torch::Tensor, torch::Tensor> global_stats(const torch::Tensor& input,
                                                      const torch::Tensor& means,
                                                      const torch::Tensor& invstds,
                                                      const torch::Tensor& counts,
                                                      const torch::Tensor& running_mean,
                                                      const torch::Tensor& running_var,
                                                      double momentum, double eps);

// (x - mean) * invstd * weight + bias, in the input's dtype and memory format.
torch::Tensor normalise(const torch::Tensor& input, const torch::Tensor& weight,
                        const torch::Tensor& bias, const torch::Tensor& mean,
                        const torch::Tensor& invstd);

// This rank's sum(dy) and sum(dy * (x - mean)) per channel, and its weight and bias gradients.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> local_grad_sums(
    const torch::Tensor& grad_output, const torch::Tensor& input, const torch::Tensor& mean,
    const torch::Tensor& invstd, const torch::Tensor& weight);

// The input gradient from the global sums; `counts` [ranks], int32 on CUDA.
torch::Tensor input_grad(const torch::Tensor& grad_output, const torch::Tensor& input,
                         const torch::Tensor& mean, const torch::Tensor& invstd,
                         const torch::Tensor& weight, const torch::Tensor& sum_dy,
                         const torch::Tensor& sum_dy_xmu, const torch::Tensor& counts);

}  // namespace dtrain::dist::sync_bn
