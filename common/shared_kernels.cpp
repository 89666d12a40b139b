#include "common/shared_kernels.h"

#include <atomic>

namespace dtrain {

namespace {

// Atomic: the trainer's thread clears it, autograd's thread requests and takes.
std::atomic<int> requests_left{0};
std::atomic<bool> standing{false};

}  // namespace

void set_standing_communication(bool on) { standing.store(on); }

bool standing_communication() { return standing.load(); }

void request_shared_kernels(int layers) { requests_left.fetch_add(layers); }

void clear_shared_kernel_requests() { requests_left.store(0); }

bool take_shared_kernel_request() {
  int left = requests_left.load();
  while (left > 0) {
    if (requests_left.compare_exchange_weak(left, left - 1)) return true;
  }
  return false;
}

}  // namespace dtrain
