#include "models/batch_norm.h"

#include "common/error.h"
#include "common/shared_kernels.h"
#if DTRAIN_CUDNN
#include "models/batch_norm_cudnn.h"
#endif

namespace dtrain::models {

BatchNormImpl::BatchNormImpl(const BatchNormOptions& options) : options_(options) { reset(); }

void BatchNormImpl::reset() {
  const int64_t c = options_.channels;
  weight = register_parameter("weight", torch::ones({c}));
  bias = register_parameter("bias", torch::zeros({c}));
  running_mean = register_buffer("running_mean", torch::zeros({c}));
  running_var = register_buffer("running_var", torch::ones({c}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kInt64));
}

torch::Tensor BatchNormImpl::forward(const torch::Tensor& input) {
  DTRAIN_CHECK(input.dim() >= 2 && input.size(1) == options_.channels,
               "BatchNorm over {} channels got input of shape {}", options_.channels,
               c10::str(input.sizes()));
  if (is_training()) {
    torch::NoGradGuard no_grad;
    num_batches_tracked += 1;
  }
  if (is_training() && training_forward_) {
    return training_forward_(input, weight, bias, running_mean, running_var, options_.momentum,
                             options_.eps);
  }
#if DTRAIN_CUDNN
  // Not beside standing communication: ATen's kernels, forward and backward, share the GPU.
  if (is_training() && !standing_communication() &&
      cudnn_bf16::accepts(input, weight, bias, running_mean, running_var, options_.eps)) {
    return cudnn_bf16::batch_norm_training(input, weight, bias, running_mean, running_var,
                                           options_.momentum, options_.eps);
  }
#endif
  return torch::batch_norm(input, weight, bias, running_mean, running_var, is_training(),
                           options_.momentum, options_.eps,
                           at::globalContext().userEnabledCuDNN());
}

int64_t set_batchnorm_training_forward(torch::nn::Module& model, const BatchNormForward& forward) {
  int64_t layers = 0;
  for (const auto& module : model.modules()) {
    if (auto* norm = module->as<BatchNormImpl>()) {
      norm->set_training_forward(forward);
      ++layers;
    }
  }
  return layers;
}

}  // namespace dtrain::models
