// The CUDA kernels behind optim/multi_tensor.h. Only for tensor tuples that
// multi_tensor.cpp has checked: same device and dtype, the same strides within a tuple,
// non-overlapping and dense; factors 1-D on that device.
#pragma once

// ATen's tensor only: this header is compiled by nvcc too.
#include <ATen/core/Tensor.h>

#include <vector>

namespace dtrain::optim::cuda {

void add_scaled_(const std::vector<at::Tensor>& targets,
                 const std::vector<at::Tensor>& sources, const at::Tensor& factors,
                 double alpha);

void lars_update_(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                  const std::vector<at::Tensor>& buffers, const at::Tensor& factors,
                  double weight_decay, double momentum);

}  // namespace dtrain::optim::cuda
