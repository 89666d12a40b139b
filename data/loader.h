// The loader: worker threads prepare batches ahead (bounded), in the sampler's order, in
// pinned memory, copied to the device asynchronously. Synthetic data stays on the device.
#pragma once

#include "data/dataset.h"
#include "data/sampler.h"

#include <torch/torch.h>

#include <memory>

namespace dtrain::data {

struct Batch {
  torch::Tensor images;  // [n, C, H, W] float32 on the target device
  torch::Tensor labels;  // [n] int64 on the target device
};

struct LoaderOptions {
  int64_t num_workers = 2;
  int64_t prefetch = 4;
  uint64_t seed = 0;
  // Only for the final copy; data prepared on the host stays float32 contiguous.
  bool channels_last = false;
};

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, ShardedSampler sampler, LoaderOptions options,
         torch::Device device);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts (or restarts) producing micro-batches of `epoch` from step `first_step`.
  void start_epoch(int64_t epoch, int64_t first_step = 0);
  // The next micro-batch of the epoch, in (step, micro) order; false at the end of the epoch.
  // Rethrows a worker's exception (e.g. a corrupt file) on the calling thread.
  bool next(Batch& batch);

  const ShardedSampler& sampler() const { return sampler_; }

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  ShardedSampler sampler_;
};

}  // namespace dtrain::data
