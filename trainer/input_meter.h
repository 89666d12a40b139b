// Whether the input pipeline keeps up, per logging interval: how long the step waited for the
// loader, the loader threads' time per image, and how many cores the process kept busy (the
// figures that show a starved GPU, and what feeding it costs).
#pragma once

#include "data/loader.h"
#include "trainer/metrics.h"

#include <cstdint>

namespace dtrain::trainer {

// User and system time of every thread of this process so far.
double process_cpu_seconds();

class InputMeter {
 public:
  // Starts an interval: forgets what the loader did before it.
  void restart(data::Loader& loader);
  void add_wait(double seconds) { wait_seconds_ += seconds; }
  // CPU time spent outside training within the interval (a checkpoint, an evaluation).
  void leave_out_cpu(double seconds) { cpu_seconds_at_start_ += seconds; }
  // "data/wait_ms" (per step), "data/decode_ms_per_image" (worker time; absent when nothing
  // was loaded, as on the device-resident synthetic data) and "cpu/cores" over `seconds`.
  MetricFields fields(data::Loader& loader, int64_t steps, double seconds);

 private:
  double wait_seconds_ = 0;
  double cpu_seconds_at_start_ = 0;
};

}  // namespace dtrain::trainer
