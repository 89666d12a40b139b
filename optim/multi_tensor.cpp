#include "optim/multi_tensor.h"

#ifdef DTRAIN_CUDA_KERNELS
#include "optim/multi_tensor_cuda.h"
#endif

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <stdexcept>

namespace dtrain::optim {

#ifdef DTRAIN_CUDA_KERNELS
namespace {

// Whether the kernels can treat every tuple (lists[0][i], lists[1][i], ...) as flat arrays of
// numel elements that correspond one to one, with one factor per tuple (undefined: none).
bool kernels_take(std::initializer_list<const std::vector<torch::Tensor>*> lists,
                  const torch::Tensor& factors) {
  const auto& first = *lists.begin();
  if (first->empty() || !has_multi_tensor_kernels(first->front().device())) return false;
  const torch::Device device = first->front().device();
  if (factors.defined() && (factors.device() != device || factors.dim() != 1 ||
                            factors.numel() != static_cast<int64_t>(first->size()))) {
    return false;
  }
  for (size_t i = 0; i < first->size(); ++i) {
    const torch::Tensor& lead = (*first)[i];
    for (const auto* list : lists) {
      const torch::Tensor& t = (*list)[i];
      if (t.device() != device || t.scalar_type() != first->front().scalar_type() ||
          !same_dense_layout(t, lead)) {
        return false;
      }
    }
  }
  return true;
}

// Whether the norm kernels take the lists: dense tensors of one dtype on one CUDA device, the
// second list's tensors as large as the first's.
bool norm_kernels_take(const std::vector<torch::Tensor>& first,
                       const std::vector<torch::Tensor>* second) {
  if (first.empty() || !has_multi_tensor_kernels(first.front().device())) return false;
  if (second && second->size() != first.size()) return false;
  const torch::Tensor& lead = first.front();
  auto takes = [&](const torch::Tensor& t) {
    return t.device() == lead.device() && t.scalar_type() == lead.scalar_type() &&
           t.is_non_overlapping_and_dense();
  };
  for (size_t i = 0; i < first.size(); ++i) {
    if (!takes(first[i])) return false;
    if (second && (!takes((*second)[i]) || (*second)[i].numel() != first[i].numel())) {
      return false;
    }
  }
  return true;
}

// LAMB's clip factor per tensor, or undefined where the kernels do not take the lists (one
// step count for all, as the kernels take one bias correction).
torch::Tensor lamb_clip_factors(const std::vector<torch::Tensor>& params,
                                const std::vector<torch::Tensor>& grads,
                                const std::vector<torch::Tensor>& exp_avgs,
                                const std::vector<torch::Tensor>& exp_avg_sqs,
                                const std::vector<int64_t>& steps, const torch::Tensor& clip) {
  if (params.empty() || !has_multi_tensor_kernels(params.front().device())) return {};
  if (!std::all_of(steps.begin(), steps.end(), [&](int64_t t) { return t == steps.front(); })) {
    return {};
  }
  const auto n = static_cast<int64_t>(params.size());
  torch::Tensor factors = clip.defined() ? clip.reshape({1}).expand({n})
                                         : torch::ones({n}, params.front().options());
  return kernels_take({&params, &grads, &exp_avgs, &exp_avg_sqs}, factors) ? factors
                                                                           : torch::Tensor();
}

cuda::LambScalars lamb_scalars(const LambDirectionArgs& args, int64_t step) {
  const auto t = static_cast<double>(step);
  return {args.beta1, args.beta2, args.eps, args.weight_decay, 1.0 - std::pow(args.beta1, t),
          std::sqrt(1.0 - std::pow(args.beta2, t))};
}

// Whether the copy kernel takes the lists: floating tensors on one CUDA device, one dtype per
// list, each pair laid out alike.
bool copy_kernel_takes(const std::vector<torch::Tensor>& targets,
                       const std::vector<torch::Tensor>& sources) {
  const torch::Tensor& lead = targets.front();
  if (!has_multi_tensor_kernels(lead.device()) || sources.size() != targets.size()) return false;
  for (size_t i = 0; i < targets.size(); ++i) {
    const torch::Tensor& target = targets[i];
    const torch::Tensor& source = sources[i];
    if (target.device() != lead.device() || source.device() != lead.device() ||
        target.scalar_type() != lead.scalar_type() ||
        source.scalar_type() != sources.front().scalar_type() ||
        !at::isFloatingType(target.scalar_type()) || !at::isFloatingType(source.scalar_type()) ||
        !same_dense_layout(target, source)) {
      return false;
    }
  }
  return true;
}

}  // namespace
#endif

bool same_dense_layout(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes() || !a.is_non_overlapping_and_dense() ||
      !b.is_non_overlapping_and_dense()) {
    return false;
  }
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  }
  return true;
}

bool has_multi_tensor_kernels(const torch::Device& device) {
#ifdef DTRAIN_CUDA_KERNELS
  return device.is_cuda();
#else
  return false;
#endif
}

torch::Tensor squared_norms(const std::vector<torch::Tensor>& first,
                            const std::vector<torch::Tensor>* second) {
#ifdef DTRAIN_CUDA_KERNELS
  if (norm_kernels_take(first, second)) return cuda::squared_norms(first, second);
#endif
  std::vector<torch::Tensor> rows{torch::stack(at::_foreach_norm(first))};
  if (second) rows.push_back(torch::stack(at::_foreach_norm(*second)));
  return torch::stack(rows).square();
}

void copy_(const std::vector<torch::Tensor>& targets, const std::vector<torch::Tensor>& sources) {
  if (targets.empty()) return;
#ifdef DTRAIN_CUDA_KERNELS
  if (copy_kernel_takes(targets, sources)) {
    cuda::copy_(targets, sources);
    return;
  }
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  at::_foreach_copy_(targets, sources);
#else
  for (size_t i = 0; i < targets.size(); ++i) targets[i].copy_(sources[i]);
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
  for (size_t i = 0; i < targets.size(); ++i) {
    targets[i].add_(sources[i] * factors[static_cast<int64_t>(i)], alpha);
  }
}

void sgd_update_(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                 const std::vector<torch::Tensor>& buffers, const SgdArgs& args) {
  if (params.empty()) return;
#ifdef DTRAIN_CUDA_KERNELS
  if (kernels_take({&params, &grads, &buffers}, torch::Tensor())) {
    cuda::sgd_update_(params, grads, buffers,
                      {args.lr, args.weight_decay, args.momentum, args.dampening, args.nesterov});
    return;
  }
#endif
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor d =
        args.weight_decay != 0.0 ? grads[i].add(params[i], args.weight_decay) : grads[i];
    buffers[i].mul_(args.momentum).add_(d, 1.0 - args.dampening);
    params[i].add_(args.nesterov ? d.add(buffers[i], args.momentum) : buffers[i], -args.lr);
  }
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
  // The .grad tensors keep the raw gradients.
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor direction =
        weight_decay != 0.0 ? grads[i].add(params[i], weight_decay) : grads[i];
    const torch::Tensor step = direction * factors[static_cast<int64_t>(i)];
    if (buffers.empty()) {
      params[i].sub_(step);
    } else {
      buffers[i].mul_(momentum).add_(step);
      params[i].sub_(buffers[i]);
    }
  }
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
  const torch::Tensor clip_factors =
      lamb_clip_factors(params, grads_in, exp_avgs, exp_avg_sqs, steps, clip);
  if (clip_factors.defined()) {
    // One allocation, viewed as each weight is laid out (dense: checked above); an allocation
    // per tensor took more host time than the kernel takes on the device.
    int64_t total = 0;
    for (const auto& param : params) total += param.numel();
    const torch::Tensor flat = torch::empty({total}, params.front().options());
    std::vector<torch::Tensor> updates;
    int64_t offset = 0;
    for (const auto& param : params) {
      updates.push_back(flat.as_strided(param.sizes(), param.strides(), offset));
      offset += param.numel();
    }
    cuda::lamb_directions_(params, grads_in, exp_avgs, exp_avg_sqs, updates, clip_factors,
                           lamb_scalars(args, steps.front()));
    return updates;
  }
#endif
  std::vector<torch::Tensor> updates;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto t = static_cast<double>(steps[i]);
    const double bias1 = 1.0 - std::pow(args.beta1, t);
    const double sqrt_bias2 = std::sqrt(1.0 - std::pow(args.beta2, t));
    const torch::Tensor grad = clip.defined() ? grads_in[i] * clip : grads_in[i];
    exp_avgs[i].mul_(args.beta1).add_(grad, 1.0 - args.beta1);
    exp_avg_sqs[i].mul_(args.beta2).addcmul_(grad, grad, 1.0 - args.beta2);
    const torch::Tensor denominator = exp_avg_sqs[i].sqrt().div_(sqrt_bias2).add_(args.eps);
    torch::Tensor update = exp_avgs[i].div(denominator).div_(bias1);
    if (args.weight_decay != 0.0) update.add_(params[i], args.weight_decay);
    updates.push_back(update);
  }
  return updates;
}

torch::Tensor lamb_moments_(const std::vector<torch::Tensor>& params,
                            const std::vector<torch::Tensor>& grads,
                            const std::vector<torch::Tensor>& exp_avgs,
                            const std::vector<torch::Tensor>& exp_avg_sqs,
                            const std::vector<int64_t>& steps, const torch::Tensor& clip,
                            const LambDirectionArgs& args) {
#ifdef DTRAIN_CUDA_KERNELS
  const torch::Tensor clip_factors =
      lamb_clip_factors(params, grads, exp_avgs, exp_avg_sqs, steps, clip);
  if (clip_factors.defined()) {
    return cuda::lamb_moments_(params, grads, exp_avgs, exp_avg_sqs, clip_factors,
                               lamb_scalars(args, steps.front()));
  }
#endif
  return {};
}

void lamb_apply_(const std::vector<torch::Tensor>& params,
                 const std::vector<torch::Tensor>& exp_avgs,
                 const std::vector<torch::Tensor>& exp_avg_sqs, const std::vector<int64_t>& steps,
                 const torch::Tensor& factors, const LambDirectionArgs& args, double alpha) {
#ifdef DTRAIN_CUDA_KERNELS
  // The lists passed lamb_moments_'s check (a second pass over 161 tensors' layouts was a
  // sixth of LAMB's host time): only the factors are new.
  if (!params.empty() && factors.device() == params.front().device() && factors.dim() == 1 &&
      factors.numel() == static_cast<int64_t>(params.size())) {
    cuda::lamb_apply_(params, exp_avgs, exp_avg_sqs, factors, lamb_scalars(args, steps.front()),
                      alpha);
    return;
  }
#endif
  throw std::logic_error("lamb_apply_ without a defined lamb_moments_ on the same lists");
}

}  // namespace dtrain::optim
