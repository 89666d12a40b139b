// SyncBatchNorm: a BatchNorm training forward (common/batch_norm_forward.h) that normalises with
// the statistics of the global batch, summed over a communicator's ranks (evaluation uses the
// running statistics, which then agree on every rank). For per-GPU batches too small for
// BatchNorm; the trainer installs it with models::set_batchnorm_training_forward.
// Cost: per BatchNorm layer, one small all-gather in forward and one small all-reduce in
// backward, on the same communicator as the gradients (every rank issues them in the same
// order); on GPUs the arithmetic is ATen's fused SyncBatchNorm kernels, as in PyTorch.
#pragma once

#include "common/batch_norm_forward.h"
#include "dist/comm/communicator.h"

#include <memory>

namespace dtrain::dist {

// Blocking: each call waits for its all-gather, and its backward for its all-reduce (on NCCL,
// the current stream waits, not the host). The function holds `comm`; every rank must run its
// layers in the same order.
BatchNormForward sync_batchnorm_forward(std::shared_ptr<Communicator> comm);

}  // namespace dtrain::dist
