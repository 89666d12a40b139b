// BatchNorm over the channels (dim 1) of [N, C, ...] inputs, with PyTorch's parameter and
// buffer names (weight, bias, running_mean, running_var, num_batches_tracked), so checkpoints
// stay torchvision's. By default it is torch::nn::BatchNorm2d (the same ATen/cuDNN kernel).
// dist::enable_sync_batchnorm replaces its training forward by SyncBatchNorm's, which
// normalises with the statistics of the global batch; the models know nothing of
// communicators: the replacement is all they see.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace dtrain::models {

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

  // Normalises in training mode instead of the per-rank kernel, and updates the running
  // statistics; the layer still counts the batches. Empty: per-rank statistics.
  using TrainingForward = std::function<torch::Tensor(BatchNormImpl&, const torch::Tensor&)>;
  void set_training_forward(TrainingForward forward) { training_forward_ = std::move(forward); }

  const BatchNormOptions& options() const { return options_; }

  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  BatchNormOptions options_;
  TrainingForward training_forward_;
};
TORCH_MODULE(BatchNorm);

}  // namespace dtrain::models
