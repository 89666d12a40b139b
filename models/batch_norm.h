// BatchNorm over the channels (dim 1) of [N, C, ...] inputs, with PyTorch's parameter and
// buffer names (weight, bias, running_mean, running_var, num_batches_tracked), so checkpoints
// stay torchvision's. Without a statistics reducer it is torch::nn::BatchNorm2d (the same
// ATen/cuDNN kernel). With one (SyncBatchNorm, set by dist::enable_sync_batchnorm), training
// normalises with the statistics of the global batch: every rank's per-channel sums go through
// the reducer, a differentiable all-reduce (sum), so backward reduces their gradients too.
// The models know nothing of communicators: the reducer is all they see.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace dtrain::models {

// Sums a tensor over every rank; differentiable (its backward sums the gradients the same way).
using StatsReducer = std::function<torch::Tensor(const torch::Tensor&)>;

struct BatchNormOptions {
  int64_t channels = 0;
  double eps = 1e-5;
  double momentum = 0.1;
};

class BatchNormImpl : public torch::nn::Cloneable<BatchNormImpl> {
 public:
  explicit BatchNormImpl(int64_t channels) : BatchNormImpl(BatchNormOptions{channels}) {}
  explicit BatchNormImpl(const BatchNormOptions& options);

  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);

  // Unset (empty) for per-rank statistics.
  void set_stats_reducer(StatsReducer reducer) { reducer_ = std::move(reducer); }
  bool synchronised() const { return static_cast<bool>(reducer_); }

  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  torch::Tensor synchronised_forward(const torch::Tensor& input);

  BatchNormOptions options_;
  StatsReducer reducer_;
};
TORCH_MODULE(BatchNorm);

}  // namespace dtrain::models
