#include "dist/sync_batchnorm.h"

#include "models/batch_norm.h"

namespace dtrain::dist {

namespace {

// Sum over the ranks, with the same sum for the gradient: every rank's output depends on every
// rank's input, each with coefficient 1.
class AllReduceSum : public torch::autograd::Function<AllReduceSum> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               Communicator* comm) {
    // The communicator outlives the reducer that holds it, and so every graph built with it.
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    torch::Tensor sum = input.contiguous().clone();
    comm->all_reduce(sum, ReduceOp::kSum)->wait();
    return sum;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    torch::Tensor sum = grads[0].contiguous().clone();
    comm->all_reduce(sum, ReduceOp::kSum)->wait();
    return {sum, torch::Tensor()};
  }
};

}  // namespace

int64_t enable_sync_batchnorm(torch::nn::Module& model, std::shared_ptr<Communicator> comm) {
  int64_t layers = 0;
  for (const auto& module : model.modules()) {
    if (auto* norm = module->as<models::BatchNormImpl>()) {
      norm->set_stats_reducer([comm](const torch::Tensor& local) {
        return AllReduceSum::apply(local, comm.get());
      });
      ++layers;
    }
  }
  return layers;
}

}  // namespace dtrain::dist
