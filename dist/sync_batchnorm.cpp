#include "dist/sync_batchnorm.h"

#include "common/error.h"
#include "dist/sync_batchnorm_kernels.h"

namespace dtrain::dist {

namespace {

// Forward: local statistics, one all-gather of [mean | invstd | count] per layer, global
// statistics, normalisation. Backward: local gradient sums, one all-reduce of
// [sum(dy) | sum(dy * (x - mean))], input gradient. Weight and bias gradients stay per rank
// (the data-parallel strategy reduces them with the others).
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& running_mean,
                               const torch::Tensor& running_var, double momentum, double eps,
                               Communicator* comm) {
    const torch::Tensor x = input.contiguous(input.suggest_memory_format());
    const int64_t channels = x.size(1);
    const int64_t count = x.numel() / channels;
    DTRAIN_CHECK(count > 0, "SyncBatchNorm got an empty batch");

    auto [mean, invstd] = sync_bn::local_stats(x, eps);
    const torch::Tensor local =
        torch::cat({mean, invstd, torch::full({1}, static_cast<double>(count), mean.options())});
    torch::Tensor gathered = torch::empty({comm->size() * local.numel()}, local.options());
    comm->all_gather(local, gathered)->wait();
    gathered = gathered.view({comm->size(), local.numel()});
    const torch::Tensor counts = gathered.select(1, 2 * channels);
    std::tie(mean, invstd) = sync_bn::global_stats(
        x, gathered.narrow(1, 0, channels), gathered.narrow(1, channels, channels), counts,
        running_mean, running_var, momentum, eps);

    // The communicator outlives every graph built while SyncBatchNorm is on (trainer setup).
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    ctx->save_for_backward({x, weight, mean, invstd, counts.to(torch::kInt32)});
    return sync_bn::normalise(x, weight, bias, mean, invstd);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3],
                        &counts = saved[4];
    const torch::Tensor grad_output = grads[0].contiguous(x.suggest_memory_format());
    const int64_t channels = x.size(1);

    auto [sum_dy, sum_dy_xmu, grad_weight, grad_bias] =
        sync_bn::local_grad_sums(grad_output, x, mean, invstd, weight);
    torch::Tensor sums = torch::cat({sum_dy, sum_dy_xmu});
    comm->all_reduce(sums, ReduceOp::kSum)->wait();
    const torch::Tensor grad_input =
        sync_bn::input_grad(grad_output, x, mean, invstd, weight, sums.narrow(0, 0, channels),
                            sums.narrow(0, channels, channels), counts);
    // One entry per forward argument: input, weight, bias, then none for the rest.
    torch::autograd::variable_list result(8);
    result[0] = grad_input;
    result[1] = grad_weight;
    result[2] = grad_bias;
    return result;
  }
};

}  // namespace

BatchNormForward sync_batchnorm_forward(std::shared_ptr<Communicator> comm) {
  return [comm](const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
                const torch::Tensor& running_mean, const torch::Tensor& running_var,
                double momentum, double eps) {
    return SyncBatchNormFunction::apply(input, weight, bias, running_mean, running_var, momentum,
                                        eps, comm.get());
  };
}

}  // namespace dtrain::dist
