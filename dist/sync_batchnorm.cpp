#include "dist/sync_batchnorm.h"

#include "common/error.h"
#include "dist/sync_batchnorm_kernels.h"
#include "models/batch_norm.h"

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
                               models::BatchNormImpl* layer, Communicator* comm) {
    const torch::Tensor x = input.contiguous(input.suggest_memory_format());
    const int64_t channels = x.size(1);
    const int64_t count = x.numel() / channels;
    DTRAIN_CHECK(count > 0, "SyncBatchNorm got an empty batch");
    const double eps = layer->options().eps;

    auto [mean, invstd] = sync_bn::local_stats(x, eps);
    const torch::Tensor local =
        torch::cat({mean, invstd, torch::full({1}, static_cast<double>(count), mean.options())});
    torch::Tensor gathered = torch::empty({comm->size() * local.numel()}, local.options());
    comm->all_gather(local, gathered)->wait();
    gathered = gathered.view({comm->size(), local.numel()});
    const torch::Tensor counts = gathered.select(1, 2 * channels);
    std::tie(mean, invstd) = sync_bn::global_stats(
        x, gathered.narrow(1, 0, channels), gathered.narrow(1, channels, channels), counts,
        layer->running_mean, layer->running_var, layer->options().momentum, eps);

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
    return {grad_input, grad_weight, grad_bias, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

int64_t enable_sync_batchnorm(torch::nn::Module& model, std::shared_ptr<Communicator> comm) {
  int64_t layers = 0;
  for (const auto& module : model.modules()) {
    if (auto* norm = module->as<models::BatchNormImpl>()) {
      norm->set_training_forward([comm](models::BatchNormImpl& layer, const torch::Tensor& input) {
        return SyncBatchNormFunction::apply(input, layer.weight, layer.bias, &layer, comm.get());
      });
      ++layers;
    }
  }
  return layers;
}

}  // namespace dtrain::dist
