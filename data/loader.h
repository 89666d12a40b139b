// The loader: worker threads prepare batches ahead (bounded), in the sampler's order, in
// pinned memory, copied to the device asynchronously. Synthetic data stays on the device.
// Image batches may leave their last stage (resize, crop, flip, normalise) to the device.
//
// Protocol, per epoch:
//   1. start_epoch(e, s) stops any workers (they finish at most the sample they are on),
//      then enumerates the micro-batches k = 0, 1, ... of steps s, s+1, ... of epoch e
//      (step s + k / grad_accum, micro k % grad_accum).
//   2. Workers claim k in increasing order, but only while k < consumed + prefetch, and
//      fill a host batch (pinned when the device is CUDA): sample i of index j is
//      dataset.get(j, ..., mix_seed(seed, e, j)), so the data does not depend on the
//      number of workers or ranks.
//   3. next() waits for batch k (or, with num_workers = 0, makes it on the spot), rethrows
//      its worker's exception if it failed, and copies it to the device (finishing it there
//      with options.finish_on_device).
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
  int64_t num_workers = 2;  // 0: batches are made inside next()
  int64_t prefetch = 4;     // batches prepared beyond the one returned last (>= 1)
  uint64_t seed = 0;
  // Only for the final copy; data prepared on the host stays float32 contiguous.
  bool channels_last = false;
  // Workers only decode (Dataset::stage); the CUDA device resamples each batch in one kernel
  // (data/resample_device.h). Needs a dataset that stages_samples() and a CUDA device.
  bool finish_on_device = false;
};

// What the workers did since the previous take_stats(): a starved device shows as a high
// wait in the trainer beside seconds per image here that the workers cannot keep up with.
struct LoaderStats {
  int64_t images = 0;
  double worker_seconds = 0;  // summed over workers: reading, decoding, augmenting
};

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, ShardedSampler sampler, LoaderOptions options,
         torch::Device device);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts (or restarts) producing micro-batches of `epoch` from step `first_step`
  // (0 <= first_step <= steps_per_epoch). Blocks until the previous workers have stopped.
  void start_epoch(int64_t epoch, int64_t first_step = 0);
  // The next micro-batch of the epoch, in (step, micro) order; false at the end of the epoch.
  // Blocks until the batch is on the host; the device copy is asynchronous (non_blocking,
  // on the current stream). A final step with drop_last = false may give a short or empty
  // (n = 0) batch: every rank still gets one batch per micro-step.
  // Synthetic (on_device) datasets return the same device batch every time: do not modify it.
  // Rethrows a worker's exception (e.g. a corrupt file) on the calling thread.
  bool next(Batch& batch);

  const ShardedSampler& sampler() const { return sampler_; }
  LoaderStats take_stats();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  ShardedSampler sampler_;
};

}  // namespace dtrain::data
