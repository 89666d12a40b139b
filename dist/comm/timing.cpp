#include "dist/comm/communicator.h"

#include <atomic>

namespace dtrain::dist {

namespace {
std::atomic<bool> timing_on{true};
}  // namespace

void set_timing(bool on) { timing_on.store(on, std::memory_order_relaxed); }

bool timing() { return timing_on.load(std::memory_order_relaxed); }

}  // namespace dtrain::dist
