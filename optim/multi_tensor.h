// The update steps of LARS and LAMB over a whole parameter group, where every tensor i is scaled by
// its own trust ratio, LAMB's Adam direction in one pass, and the squared norms of the trust
// ratios. ATen's list ops take a per-tensor factor only as a host scalar (a device-to-host sync) or
// as one 0-d tensor per entry (one kernel per tensor), so on CUDA these run as chunked multi-tensor
// kernels (optim/multi_tensor_cuda.cu, in the manner of apex's multi_tensor_apply): a handful of
// launches for a ResNet-50, no sync. Elsewhere, or for tensors those kernels do not take (mixed
// dtypes or layouts within a tuple, overlapping memory), they run tensor by tensor with the same
// arithmetic: on the CPU that is the fast way, as launches cost nothing there and each temporary is
// freed before the next is made. (ATen's out-of-place list ops keep every tensor's temporary alive
// at once, and on this 2-core machine page-faulting 100 MB of fresh memory per list op cost ~300 ms
// a step for ResNet-50, against ~6 ms for the arithmetic.)
//
// `factors`: 1-D, one entry per tensor, on the tensors' device; it is never read on the host.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace dtrain::optim {

// Whether `a` and `b` hold their elements densely and in the same order in memory: the same
// sizes, no overlap or gaps, and the same strides on every dimension longer than one. A
// dimension of size 1 may carry any stride: autograd gives a 1x1 convolution's gradient
// [out, in, 1, 1] other strides there than its channels_last weight's, and the kernels, which
// walk the tensors as flat arrays, take such a pair (taking only identical strides sent every
// ResNet's SGD step, whose buffers follow the gradients, down the per-tensor path).
bool same_dense_layout(const torch::Tensor& a, const torch::Tensor& b);

// targets[i] = sources[i], cast to targets[i]'s dtype. On CUDA, for floating tensors laid out
// alike, one chunked kernel moves at most 1,024 chunks of 8,192 elements a launch, several
// blocks per SM, where ATen's _foreach_copy_ moves a gradient bucket at about a third of the
// memory bandwidth; elsewhere ATen's own copies.
void copy_(const std::vector<torch::Tensor>& targets, const std::vector<torch::Tensor>& sources);

// targets[i] += alpha * factors[i] * sources[i]
void add_scaled_(const std::vector<torch::Tensor>& targets,
                 const std::vector<torch::Tensor>& sources, const torch::Tensor& factors,
                 double alpha);

struct SgdArgs {
  double lr = 0.1;
  double weight_decay = 0.0;
  double momentum = 0.9;
  double dampening = 0.0;
  bool nesterov = false;
};

// torch::optim::SGD's step for parameters whose momentum buffers b exist, reading w, g, b once
// and writing w, b once (20 bytes a parameter; ATen's list ops take 44):
//   d = g + wd * w;  b = momentum * b + (1 - dampening) * d;
//   w -= lr * (nesterov ? d + momentum * b : b)
void sgd_update_(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                 const std::vector<torch::Tensor>& buffers, const SgdArgs& args);

// The LARS update, reading w, g, v once and writing w, v once:
//   d = factors[i] * (g + weight_decay * w);  v = momentum * v + d;  w -= v
// With no buffers (momentum 0): w -= d.
void lars_update_(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                  const std::vector<torch::Tensor>& buffers, const torch::Tensor& factors,
                  double weight_decay, double momentum);

struct LambDirectionArgs {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.0;
};

// LAMB's direction before the trust ratio (Adam moments with bias correction, plus decay),
// updating the moments in place and returning u, laid out as the weights:
//   g' = clip * g (clip: a 0-d tensor on the device, or undefined for none)
//   m = beta1 m + (1 - beta1) g';  v = beta2 v + (1 - beta2) g'^2
//   u = (m / (1 - beta1^t)) / (sqrt(v) / sqrt(1 - beta2^t) + eps) + weight_decay * w
// t: steps[i], the tensor's own step count (one kernel pass when they are all equal).
std::vector<torch::Tensor> lamb_directions(const std::vector<torch::Tensor>& params,
                                           const std::vector<torch::Tensor>& grads,
                                           const std::vector<torch::Tensor>& exp_avgs,
                                           const std::vector<torch::Tensor>& exp_avg_sqs,
                                           const std::vector<int64_t>& steps,
                                           const torch::Tensor& clip,
                                           const LambDirectionArgs& args);

// LAMB's step in two passes on CUDA, the direction u never stored (it would be written and
// read back once more: 48 bytes a parameter against 40). lamb_moments_ updates the moments as
// lamb_directions does and returns [2, n], the squared norms of w and of u; undefined, changing
// nothing, where the kernels do not take the lists (then use lamb_directions). lamb_apply_,
// only after a defined lamb_moments_ on the same lists, does w += alpha * factors[i] * u with
// u recomputed from the updated moments.
torch::Tensor lamb_moments_(const std::vector<torch::Tensor>& params,
                            const std::vector<torch::Tensor>& grads,
                            const std::vector<torch::Tensor>& exp_avgs,
                            const std::vector<torch::Tensor>& exp_avg_sqs,
                            const std::vector<int64_t>& steps, const torch::Tensor& clip,
                            const LambDirectionArgs& args);
void lamb_apply_(const std::vector<torch::Tensor>& params,
                 const std::vector<torch::Tensor>& exp_avgs,
                 const std::vector<torch::Tensor>& exp_avg_sqs, const std::vector<int64_t>& steps,
                 const torch::Tensor& factors, const LambDirectionArgs& args, double alpha);

// [L, n]: the sum of squares of each tensor of `first` (L = 1) and of `*second` (L = 2, null
// for none; tensor i as many elements as first's), the squared norms of LARS's and LAMB's
// trust ratios. `first` non-empty. On CUDA two multi-tensor passes with a fixed order of
// additions, in the op-math type (fp32 for 16-bit tensors): ATen's list norm allocates a 0-d
// tensor per entry, and those allocations and the stack after them were most of the LARS
// step's host time. Elsewhere ATen's norms, squared.
torch::Tensor squared_norms(const std::vector<torch::Tensor>& first,
                            const std::vector<torch::Tensor>* second = nullptr);

// Whether the functions above run as multi-tensor kernels on `device` (for benchmarks and
// logs).
bool has_multi_tensor_kernels(const torch::Device& device);

}  // namespace dtrain::optim
