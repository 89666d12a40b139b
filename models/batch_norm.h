// BatchNorm over the channels (dim 1) of [N, C, ...] inputs, with PyTorch's parameter and
// buffer names (weight, bias, running_mean, running_var, num_batches_tracked), so checkpoints
// stay torchvision's. By default it runs torch::nn::BatchNorm2d's kernels, except bf16 training
// on a GPU, which takes cuDNN's (models/batch_norm_cudnn.h) where ATen would take its own.
// Its training forward can be replaced by a function on tensors, such as SyncBatchNorm's
// (dist::sync_batchnorm_forward), which normalises with the statistics of the global batch;
// the models know nothing of communicators: the function is all they see.
#pragma once

#include "common/batch_norm_forward.h"

#include <torch/torch.h>

#include <cstdint>
#include <utility>

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

  // Called in training mode, instead of the per-rank kernel, with this layer's tensors and
  // options; the layer still counts the batches. Empty: per-rank statistics.
  void set_training_forward(BatchNormForward forward) { training_forward_ = std::move(forward); }

  const BatchNormOptions& options() const { return options_; }

  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  BatchNormOptions options_;
  BatchNormForward training_forward_;
};
TORCH_MODULE(BatchNorm);

// Sets the training forward of every BatchNorm in `model` (an empty function restores the
// per-rank kernel); returns how many layers it set.
int64_t set_batchnorm_training_forward(torch::nn::Module& model, const BatchNormForward& forward);

}  // namespace dtrain::models
