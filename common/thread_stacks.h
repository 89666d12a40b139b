// Where every thread of this process is, for a rank that ends because something it waited
// for never came: which call each thread sits in (the compute thread inside a CUDA library,
// a server thread in NCCL, ...), written to the rank's log file beside the one-line error.
// Each thread is interrupted by a real-time signal whose handler records its return
// addresses; the caller names them (the library, the exported symbol if any, the offset).
// A thread that does not answer within `wait` (blocked with signals held, or in the kernel)
// is listed as such.
#pragma once

#include <chrono>
#include <string>

namespace dtrain {

std::string thread_stacks(std::chrono::milliseconds wait = std::chrono::milliseconds(300));

}  // namespace dtrain
