#include "optim/multi_tensor.h"

#ifdef DTRAIN_CUDA_KERNELS
#include "optim/multi_tensor_cuda.h"
#endif

#include <torch/version.h>

#include <algorithm>
#include <cmath>
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

namespace {

// grads * clip, clip a 0-d tensor on their device. LibTorch 2.x multiplies a list by one tensor
// in a single multi-tensor launch; 1.x (Debian's) only by a list of them, one kernel each.
std::vector<torch::Tensor> clipped(const std::vector<torch::Tensor>& grads,
                                   const torch::Tensor& clip) {
#if TORCH_VERSION_MAJOR >= 2
  return at::_foreach_mul(grads, clip);
#else
  return at::_foreach_mul(grads, std::vector<torch::Tensor>(grads.size(), clip));
#endif
}

// tensors[i] * factors[i], out of place. A CPU tensor's factors are read on the host, free there,
// so the list multiply takes plain scalars; elsewhere one 0-d device tensor per entry.
std::vector<torch::Tensor> scaled(const std::vector<torch::Tensor>& tensors,
                                  const torch::Tensor& factors) {
  if (!factors.device().is_cpu()) return at::_foreach_mul(tensors, factors.unbind(0));
  const torch::Tensor values = factors.to(torch::kFloat64).contiguous();
  const double* data = values.data_ptr<double>();
  const std::vector<at::Scalar> scalars(data, data + values.numel());
  return at::_foreach_mul(tensors, scalars);
}

}  // namespace

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
  at::_foreach_add_(targets, scaled(sources, factors), alpha);
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
  steps = scaled(steps, factors);
  if (!buffers.empty()) {
    at::_foreach_mul_(buffers, momentum);
    at::_foreach_add_(buffers, steps);
    steps = buffers;
  }
  at::_foreach_add_(params, steps, -1.0);
}

std::vector<torch::Tensor> lamb_directions(const std::vector<torch::Tensor>& params,
                                           const std::vector<torch::Tensor>& grads_in,
                                           const std::vector<torch::Tensor>& exp_avgs,
                                           const std::vector<torch::Tensor>& exp_avg_sqs,
                                           const std::vector<int64_t>& steps,
                                           const torch::Tensor& clip,
                                           const LambDirectionArgs& args) {
  if (params.empty()) return {};
#ifdef DTRAIN_CUDA_KERNELS
  const bool one_step = std::all_of(steps.begin(), steps.end(),
                                    [&](int64_t t) { return t == steps.front(); });
  const auto n = static_cast<int64_t>(params.size());
  const torch::Tensor clip_factors =
      !one_step || !has_multi_tensor_kernels(params.front().device()) ? torch::Tensor()
      : clip.defined() ? clip.reshape({1}).expand({n})
                       : torch::ones({n}, params.front().options());
  if (clip_factors.defined() &&
      kernels_take({&params, &grads_in, &exp_avgs, &exp_avg_sqs}, clip_factors)) {
    std::vector<torch::Tensor> updates;
    for (const auto& param : params) {
      updates.push_back(torch::empty_like(param, torch::MemoryFormat::Preserve));
    }
    const auto t = static_cast<double>(steps.front());
    cuda::lamb_directions_(params, grads_in, exp_avgs, exp_avg_sqs, updates, clip_factors,
                           {args.beta1, args.beta2, args.eps, args.weight_decay,
                            1.0 - std::pow(args.beta1, t), std::sqrt(1.0 - std::pow(args.beta2, t))});
    return updates;
  }
#endif
  std::vector<at::Scalar> bias1, sqrt_bias2;  // 1 - b1^t and sqrt(1 - b2^t), per tensor
  for (const int64_t step : steps) {
    const auto t = static_cast<double>(step);
    bias1.push_back(1.0 - std::pow(args.beta1, t));
    sqrt_bias2.push_back(std::sqrt(1.0 - std::pow(args.beta2, t)));
  }
  const std::vector<torch::Tensor> grads = clip.defined() ? clipped(grads_in, clip) : grads_in;
  at::_foreach_mul_(exp_avgs, args.beta1);
  at::_foreach_add_(exp_avgs, grads, 1.0 - args.beta1);
  at::_foreach_mul_(exp_avg_sqs, args.beta2);
  at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1.0 - args.beta2);
  std::vector<torch::Tensor> denominators = at::_foreach_sqrt(exp_avg_sqs);
  at::_foreach_div_(denominators, sqrt_bias2);
  at::_foreach_add_(denominators, args.eps);
  std::vector<torch::Tensor> updates = at::_foreach_div(exp_avgs, denominators);
  at::_foreach_div_(updates, bias1);
  if (args.weight_decay != 0.0) at::_foreach_add_(updates, params, args.weight_decay);
  return updates;
}

}  // namespace dtrain::optim
