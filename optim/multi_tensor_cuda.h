// The CUDA kernels behind optim/multi_tensor.h. Only for tensor tuples that
// multi_tensor.cpp has checked: same device and dtype, the same strides within a tuple,
// non-overlapping and dense; factors 1-D on that device.
#pragma once

// ATen's tensor only: this header is compiled by nvcc too.
#include <ATen/core/Tensor.h>

#include <vector>

namespace dtrain::optim::cuda {

// targets[i] = sources[i], cast to the targets' dtype (float, half or bfloat16 each; one dtype
// per list).
void copy_(const std::vector<at::Tensor>& targets, const std::vector<at::Tensor>& sources);

void add_scaled_(const std::vector<at::Tensor>& targets,
                 const std::vector<at::Tensor>& sources, const at::Tensor& factors,
                 double alpha);

void lars_update_(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                  const std::vector<at::Tensor>& buffers, const at::Tensor& factors,
                  double weight_decay, double momentum);

struct SgdScalars {
  double lr, weight_decay, momentum, dampening;
  bool nesterov;
};

// torch::optim::SGD's step with existing momentum buffers, one pass (20 bytes a parameter).
void sgd_update_(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                 const std::vector<at::Tensor>& buffers, const SgdScalars& scalars);

struct LambScalars {
  double beta1, beta2, eps, weight_decay;
  double bias1, sqrt_bias2;  // 1 - beta1^t and sqrt(1 - beta2^t), one t for every tensor
};

// updates: allocated by the caller, laid out as params.
void lamb_directions_(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs,
                      const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& updates, const at::Tensor& clip_factors,
                      const LambScalars& scalars);

// LAMB in two passes, the direction never stored: lamb_moments_ updates the moments and
// returns [2, n] in the op-math type, the squared norms of w and of u (as lamb_directions_
// computes u); lamb_apply_ then does w += alpha * factors[i] * u, u recomputed from the
// updated moments.
at::Tensor lamb_moments_(const std::vector<at::Tensor>& params,
                         const std::vector<at::Tensor>& grads,
                         const std::vector<at::Tensor>& exp_avgs,
                         const std::vector<at::Tensor>& exp_avg_sqs,
                         const at::Tensor& clip_factors, const LambScalars& scalars);
void lamb_apply_(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& exp_avgs,
                 const std::vector<at::Tensor>& exp_avg_sqs, const at::Tensor& factors,
                 const LambScalars& scalars, double alpha);

// [L, n] in the op-math type: the sum of squares of each tensor of `first` (L = 1) and of
// `second` (L = 2; tensor i as many elements as first's). Dense tensors of one dtype. Two
// passes with a fixed order of additions: the same result every run.
at::Tensor squared_norms(const std::vector<at::Tensor>& first,
                         const std::vector<at::Tensor>* second);

// ratio_i (optim/trust_ratio.h) from the squared norms [2, n] (a float or double tensor on
// the device), in one kernel.
at::Tensor trust_ratios(const at::Tensor& sq_norms, double coefficient, double weight_decay,
                        double eps, double max_ratio);

}  // namespace dtrain::optim::cuda
