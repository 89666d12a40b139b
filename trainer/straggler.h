// Stragglers made on demand ([debug] slow_ranks, slow_factor): a slowed rank times its forward
// and backward every step, then idles (slow_factor - 1) times as long through
// Strategy::pause, so to the other ranks its compute looks slow_factor times slower.
#pragma once

#include "dist/strategy.h"
#include "trainer/options.h"
#include "trainer/timeline.h"

#include <torch/torch.h>

#include <chrono>

namespace dtrain::trainer {

class Straggler {
 public:
  // Slowed when world rank `rank` is one of options.slow_ranks; otherwise every call does
  // nothing.
  Straggler(const DebugOptions& options, int rank, torch::Device device);

  // After before_forward() returns.
  void start();
  // After the last micro-step's after_backward(): strategy.pause() for (slow_factor - 1) times
  // the time since start(), shown on `timeline` as the host span "straggler pause". On CUDA it
  // waits for the device at start() and here (a host sync per step, on slowed ranks only), so
  // the time measured is the device's forward and backward.
  void pause(dist::Strategy& strategy, Timeline& timeline);

 private:
  void wait_for_device() const;

  bool slowed_;
  double extra_;  // slow_factor - 1
  torch::Device device_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dtrain::trainer
