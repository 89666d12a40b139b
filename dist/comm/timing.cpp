#include "dist/comm/communicator.h"

#include <atomic>
#include <cmath>

namespace dtrain::dist {

namespace {
std::atomic<bool> timing_on{true};
}  // namespace

void set_timing(bool on) { timing_on.store(on, std::memory_order_relaxed); }

bool timing() { return timing_on.load(std::memory_order_relaxed); }

double measured_ms(const TimePoint& from, const TimePoint& to) {
  const double ms = from.ms_until(to);
  return std::isnan(ms) ? 0.0 : ms;
}

}  // namespace dtrain::dist
