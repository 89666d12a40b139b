#include "trainer/straggler.h"

#include <torch/cuda.h>

#include <algorithm>

namespace dtrain::trainer {

Straggler::Straggler(const DebugOptions& options, int rank, torch::Device device)
    : slowed_(std::count(options.slow_ranks.begin(), options.slow_ranks.end(), rank) > 0),
      extra_(options.slow_factor - 1.0),
      device_(device) {}

void Straggler::start() {
  if (!slowed_) return;
  // Not counting device work still queued: the previous step's update, this step's buffer sync.
  wait_for_device();
  start_ = std::chrono::steady_clock::now();
}

void Straggler::pause(dist::Strategy& strategy, Timeline& timeline) {
  if (!slowed_) return;
  wait_for_device();
  const double seconds =
      extra_ * std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  Timeline::Phase phase(timeline, "straggler pause");
  strategy.pause(seconds);
}

void Straggler::wait_for_device() const {
  if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
}

}  // namespace dtrain::trainer
