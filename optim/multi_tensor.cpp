#include "optim/multi_tensor.h"

#ifdef DTRAIN_CUDA_KERNELS
#include "optim/multi_tensor_cuda.h"
#endif

#include <initializer_list>

namespace dtrain::optim {

#ifdef DTRAIN_CUDA_KERNELS
namespace {

// Whether the kernels can treat every tuple (lists[0][i], lists[1][i], ...) as flat arrays of
// numel elements that correspond one to one.
bool kernels_take(std::initializer_list<const std::vector<torch::Tensor>*> lists,
                  const torch::Tensor& factors) {
  const auto& first = *lists.begin();
  if (first->empty() || !has_multi_tensor_kernels(first->front().device())) return false;
  const torch::Device device = first->front().device();
  if (factors.device() != device || factors.dim() != 1 ||
      factors.numel() != static_cast<int64_t>(first->size())) {
    return false;
  }
  for (size_t i = 0; i < first->size(); ++i) {
    const torch::Tensor& lead = (*first)[i];
    for (const auto* list : lists) {
      const torch::Tensor& t = (*list)[i];
      if (t.device() != device || t.scalar_type() != first->front().scalar_type() ||
          t.strides() != lead.strides() || t.sizes() != lead.sizes() ||
          !t.is_non_overlapping_and_dense()) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace
#endif

bool has_multi_tensor_kernels(const torch::Device& device) {
#ifdef DTRAIN_CUDA_KERNELS
  return device.is_cuda();
#else
  return false;
#endif
}

void add_scaled_(const std::vector<torch::Tensor>& targets,
                 const std::vector<torch::Tensor>& sources, const torch::Tensor& factors,
                 double alpha) {
  if (targets.empty()) return;
#ifdef DTRAIN_CUDA_KERNELS
  if (kernels_take({&targets, &sources}, factors)) {
    cuda::add_scaled_(targets, sources, factors, alpha);
    return;
  }
#endif
  // 0-d views of `factors`: the list form broadcasts each over its tensor.
  at::_foreach_add_(targets, at::_foreach_mul(sources, factors.unbind(0)), alpha);
}

void lars_update_(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                  const std::vector<torch::Tensor>& buffers, const torch::Tensor& factors,
                  double weight_decay, double momentum) {
  if (params.empty()) return;
#ifdef DTRAIN_CUDA_KERNELS
  if (buffers.empty() ? kernels_take({&params, &grads}, factors)
                      : kernels_take({&params, &grads, &buffers}, factors)) {
    cuda::lars_update_(params, grads, buffers, factors, weight_decay, momentum);
    return;
  }
#endif
  // Out of place: the .grad tensors keep the raw gradients.
  std::vector<torch::Tensor> steps =
      weight_decay != 0.0 ? at::_foreach_add(grads, params, weight_decay) : grads;
  steps = at::_foreach_mul(steps, factors.unbind(0));
  if (!buffers.empty()) {
    at::_foreach_mul_(buffers, momentum);
    at::_foreach_add_(buffers, steps);
    steps = buffers;
  }
  at::_foreach_add_(params, steps, -1.0);
}

}  // namespace dtrain::optim
