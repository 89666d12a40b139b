#include "models/batch_norm.h"

#include "common/error.h"

#include <vector>

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
  if (is_training() && reducer_) return synchronised_forward(input);
  return torch::batch_norm(input, weight, bias, running_mean, running_var, is_training(),
                           options_.momentum, options_.eps,
                           at::globalContext().userEnabledCuDNN());
}

// Statistics in fp32 at least (inputs may be bf16 under autocast), shifted by the running mean
// (the same on every rank: it follows the global statistics) so that the one-pass variance
// E[(x-K)^2] - E[x-K]^2 does not cancel; one collective a forward, one a backward.
torch::Tensor BatchNormImpl::synchronised_forward(const torch::Tensor& input) {
  const auto math_type =
      input.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  std::vector<int64_t> reduced_dims = {0};
  std::vector<int64_t> channel_shape(static_cast<size_t>(input.dim()), 1);
  channel_shape[1] = options_.channels;
  for (int64_t d = 2; d < input.dim(); ++d) reduced_dims.push_back(d);

  const torch::Tensor x = input.to(math_type);
  const torch::Tensor shift = running_mean.detach().to(math_type).view(channel_shape);
  const torch::Tensor centred = x - shift;
  const int64_t local_count = input.numel() / options_.channels;
  DTRAIN_CHECK(local_count > 0, "SyncBatchNorm got an empty batch");
  // [2C + 1]: sums of (x - K), of (x - K)^2, and the element count per channel.
  const torch::Tensor local =
      torch::cat({centred.sum(reduced_dims), centred.square().sum(reduced_dims),
                  torch::full({1}, static_cast<double>(local_count), x.options())});
  const torch::Tensor global = reducer_(local);
  const int64_t c = options_.channels;
  const torch::Tensor count = global.narrow(0, 2 * c, 1);
  const torch::Tensor shifted_mean = global.narrow(0, 0, c) / count;
  const torch::Tensor var = global.narrow(0, c, c) / count - shifted_mean.square();
  const torch::Tensor mean = shifted_mean + shift.view({c});
  {
    // On the device, no host synchronisation: running_var takes the unbiased variance.
    torch::NoGradGuard no_grad;
    const double m = options_.momentum;
    running_mean.mul_(1 - m).add_(mean.to(running_mean.scalar_type()), m);
    running_var.mul_(1 - m).add_((var * count / (count - 1)).to(running_var.scalar_type()), m);
  }
  const torch::Tensor scale = (var + options_.eps).rsqrt() * weight.to(math_type);
  const torch::Tensor output =
      (x - mean.view(channel_shape)) * scale.view(channel_shape) +
      bias.to(math_type).view(channel_shape);
  return output.to(input.scalar_type());
}

}  // namespace dtrain::models
