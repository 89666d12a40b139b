#include "dist/sync_batchnorm_kernels.h"

#include <vector>

namespace dtrain::dist::sync_bn {

namespace {

torch::ScalarType math_type(const torch::Tensor& input) {
  return input.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

// Every dimension but the channels (1).
std::vector<int64_t> reduced_dims(const torch::Tensor& input) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// A [C] tensor shaped to broadcast against the input.
torch::Tensor per_channel(const torch::Tensor& values, const torch::Tensor& input) {
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = input.size(1);
  return values.view(shape);
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor> local_stats(const torch::Tensor& input, double eps) {
  if (input.is_cuda()) return at::batch_norm_stats(input, eps);
  auto [var, mean] = torch::var_mean(input.to(math_type(input)), reduced_dims(input),
                                     /*unbiased=*/false);
  return {mean, (var + eps).rsqrt()};
}

std::tuple<torch::Tensor, torch::Tensor> global_stats(const torch::Tensor& input,
                                                      const torch::Tensor& means,
                                                      const torch::Tensor& invstds,
                                                      const torch::Tensor& counts,
                                                      const torch::Tensor& running_mean,
                                                      const torch::Tensor& running_var,
                                                      double momentum, double eps) {
  if (input.is_cuda()) {
    return at::batch_norm_gather_stats_with_counts(input, means, invstds, running_mean,
                                                   running_var, momentum, eps, counts);
  }
  // Chan et al.'s parallel variance: each rank's spread around the global mean.
  const torch::Tensor weights = counts.unsqueeze(1);
  const torch::Tensor total = counts.sum();
  const torch::Tensor mean = (means * weights).sum(0) / total;
  const torch::Tensor rank_vars = invstds.square().reciprocal() - eps;
  const torch::Tensor var = ((rank_vars + (means - mean).square()) * weights).sum(0) / total;
  running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
  running_var.mul_(1 - momentum)
      .add_((var * total / (total - 1)).to(running_var.scalar_type()), momentum);
  return {mean, (var + eps).rsqrt()};
}

torch::Tensor normalise(const torch::Tensor& input, const torch::Tensor& weight,
                        const torch::Tensor& bias, const torch::Tensor& mean,
                        const torch::Tensor& invstd) {
  // invstd already holds eps (the kernel ignores its eps argument).
  if (input.is_cuda()) return at::batch_norm_elemt(input, weight, bias, mean, invstd, 0.0);
  const auto type = math_type(input);
  const torch::Tensor scale = invstd * weight.to(type);
  return ((input.to(type) - per_channel(mean, input)) * per_channel(scale, input) +
          per_channel(bias.to(type), input))
      .to(input.scalar_type());
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> local_grad_sums(
    const torch::Tensor& grad_output, const torch::Tensor& input, const torch::Tensor& mean,
    const torch::Tensor& invstd, const torch::Tensor& weight) {
  if (input.is_cuda()) {
    return at::batch_norm_backward_reduce(grad_output, input, mean, invstd, weight, true, true,
                                          true);
  }
  const auto type = math_type(input);
  const auto dims = reduced_dims(input);
  const torch::Tensor dy = grad_output.to(type);
  const torch::Tensor sum_dy = dy.sum(dims);
  const torch::Tensor sum_dy_xmu = (dy * (input.to(type) - per_channel(mean, input))).sum(dims);
  return {sum_dy, sum_dy_xmu, (sum_dy_xmu * invstd).to(weight.scalar_type()),
          sum_dy.to(weight.scalar_type())};
}

torch::Tensor input_grad(const torch::Tensor& grad_output, const torch::Tensor& input,
                         const torch::Tensor& mean, const torch::Tensor& invstd,
                         const torch::Tensor& weight, const torch::Tensor& sum_dy,
                         const torch::Tensor& sum_dy_xmu, const torch::Tensor& counts) {
  if (input.is_cuda()) {
    return at::batch_norm_backward_elemt(grad_output, input, mean, invstd, weight, sum_dy,
                                         sum_dy_xmu, counts);
  }
  // dx = w * invstd * (dy - sum(dy) / N - (x - mean) * invstd^2 * sum(dy * (x - mean)) / N)
  const auto type = math_type(input);
  const torch::Tensor total = counts.sum().to(type);
  const torch::Tensor centred = input.to(type) - per_channel(mean, input);
  const torch::Tensor grad =
      (grad_output.to(type) - per_channel(sum_dy / total, input) -
       centred * per_channel(invstd.square() * sum_dy_xmu / total, input)) *
      per_channel(invstd * weight.to(type), input);
  return grad.to(input.scalar_type());
}

}  // namespace dtrain::dist::sync_bn
