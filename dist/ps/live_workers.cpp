#include "dist/ps/live_workers.h"

#include <algorithm>

namespace dtrain::dist {

LiveWorkers::LiveWorkers(int workers, double timeout_s, Clock::time_point now)
    : timeout_s_(timeout_s),
      last_heard_(static_cast<size_t>(workers), now),
      calls_(static_cast<size_t>(workers), 0),
      lost_(static_cast<size_t>(workers), false) {}

void LiveWorkers::heard(size_t w, Clock::time_point now) { last_heard_[w] = now; }

void LiveWorkers::called(size_t w, Clock::time_point now) {
  heard(w, now);
  ++calls_[w];
}

std::vector<size_t> LiveWorkers::find_lost(Clock::time_point now) {
  std::vector<size_t> found;
  bool someone_waits = false;
  for (size_t w = 0; w < lost_.size(); ++w) someone_waits |= !lost_[w] && calls_[w] > answered_;
  if (!someone_waits) return found;
  for (size_t w = 0; w < lost_.size(); ++w) {
    const double silent_s = std::chrono::duration<double>(now - last_heard_[w]).count();
    if (!lost_[w] && calls_[w] == answered_ && silent_s > timeout_s_) {
      lost_[w] = true;
      found.push_back(w);
    }
  }
  return found;
}

bool LiveWorkers::answer(Clock::time_point now) {
  for (size_t w = 0; w < lost_.size(); ++w) {
    if (!lost_[w] && calls_[w] <= answered_) return false;
  }
  if (live() == 0) return false;
  ++answered_;
  std::fill(last_heard_.begin(), last_heard_.end(), now);
  return true;
}

int LiveWorkers::live() const {
  return static_cast<int>(std::count(lost_.begin(), lost_.end(), false));
}

std::vector<int64_t> LiveWorkers::mask() const {
  std::vector<int64_t> mask;
  for (const bool lost : lost_) mask.push_back(lost ? 0 : 1);
  return mask;
}

}  // namespace dtrain::dist
