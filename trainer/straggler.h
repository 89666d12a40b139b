// Stragglers made on demand ([debug] slow_ranks, slow_factor, slow_pattern): a slowed rank
// times its forward and backward, then idles (slow_factor - 1) times as long through
// Strategy::pause, so to the other ranks its compute looks slow_factor times slower: every
// step ("fixed"), or on its turn among slow_ranks ("rotating").
#pragma once

#include "dist/strategy.h"
#include "trainer/options.h"
#include "trainer/timeline.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace dtrain::trainer {

class Straggler {
 public:
  // Slowed when world rank `rank` is one of options.slow_ranks (and, rotating, on its
  // turn); otherwise every call does nothing.
  Straggler(const DebugOptions& options, int rank, torch::Device device);

  // After before_forward(`step`) returns.
  void start(int64_t step);
  // After the last micro-step's after_backward(): strategy.pause() for (slow_factor - 1) times
  // the time since start(), shown on `timeline` as the host span "straggler pause". On CUDA it
  // waits for the compute stream at start() and here (a host sync per slowed step), so the
  // time measured is the device's forward and backward.
  void pause(dist::Strategy& strategy, Timeline& timeline);

 private:
  void wait_for_device() const;

  std::vector<int64_t> turns_;  // the positions of this rank in slow_ranks
  int64_t ranks_ = 0;           // rotating: slow_ranks' length; fixed: 0
  bool slowed_ = false;         // this step
  double extra_;  // slow_factor - 1
  torch::Device device_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dtrain::trainer
