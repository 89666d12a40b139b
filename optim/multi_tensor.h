// Per-tensor scaled updates over a whole parameter group: the last step of LARS and LAMB, where
// every tensor i is scaled by its own trust ratio. ATen's list ops take a per-tensor factor only
// as a host scalar (a device-to-host sync) or as one 0-d tensor per entry (one kernel per
// tensor), so on CUDA these run as chunked multi-tensor kernels (optim/multi_tensor_cuda.cu, in
// the manner of apex's multi_tensor_apply): a handful of launches for a ResNet-50, no sync.
// Elsewhere, or for tensors those kernels do not take (mixed dtypes or layouts within a tuple,
// overlapping memory), they run as ATen list ops with the same arithmetic.
//
// `factors`: 1-D, one entry per tensor, on the tensors' device; it is never read on the host.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace dtrain::optim {

// targets[i] += alpha * factors[i] * sources[i]
void add_scaled_(const std::vector<torch::Tensor>& targets,
                 const std::vector<torch::Tensor>& sources, const torch::Tensor& factors,
                 double alpha);

// The LARS update, reading w, g, v once and writing w, v once:
//   d = factors[i] * (g + weight_decay * w);  v = momentum * v + d;  w -= v
// With no buffers (momentum 0): w -= d.
void lars_update_(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                  const std::vector<torch::Tensor>& buffers, const torch::Tensor& factors,
                  double weight_decay, double momentum);

// Whether add_scaled_ and lars_update_ on `device` run as multi-tensor kernels (for benchmarks
// and logs).
bool has_multi_tensor_kernels(const torch::Device& device);

}  // namespace dtrain::optim
