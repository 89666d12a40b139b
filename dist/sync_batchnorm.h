// SyncBatchNorm: every models::BatchNorm of a model normalises with the statistics of the global
// batch, summed over a communicator's ranks, in training (evaluation uses the running
// statistics, which then agree on every rank). For per-GPU batches too small for BatchNorm.
// Cost: per BatchNorm layer, one small all-gather in forward and one small all-reduce in
// backward, on the same communicator as the gradients (every rank issues them in the same
// order); on GPUs the arithmetic is ATen's fused SyncBatchNorm kernels, as in PyTorch.
#pragma once

#include "dist/comm/communicator.h"

#include <torch/torch.h>

#include <memory>

namespace dtrain::dist {

// Returns the number of BatchNorm layers switched over.
int64_t enable_sync_batchnorm(torch::nn::Module& model, std::shared_ptr<Communicator> comm);

}  // namespace dtrain::dist
