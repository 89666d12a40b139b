#include "trainer/straggler.h"

#include "common/host_wait.h"

#include <algorithm>

namespace dtrain::trainer {

Straggler::Straggler(const DebugOptions& options, int rank, torch::Device device)
    : extra_(options.slow_factor - 1.0), device_(device) {
  for (size_t i = 0; i < options.slow_ranks.size(); ++i) {
    if (options.slow_ranks[i] == rank) turns_.push_back(static_cast<int64_t>(i));
  }
  if (options.slow_pattern == "rotating") ranks_ = static_cast<int64_t>(options.slow_ranks.size());
}

void Straggler::start(int64_t step) {
  slowed_ = !turns_.empty() &&
            (ranks_ == 0 || std::count(turns_.begin(), turns_.end(), step % ranks_) > 0);
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
  // The compute stream only: a device-wide sync would also wait for collectives queued on
  // other streams that need the other ranks, and so tie this rank to them (a parameter
  // server's slack would be gone).
  wait_for_stream(device_);
}

}  // namespace dtrain::trainer
