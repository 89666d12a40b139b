// The Kineto profiler (CUDA kernels, copies and runtime calls) over a window of optimizer
// steps, saved as a Chrome trace (chrome://tracing, Perfetto) per rank. Kineto comes with the CUDA LibTorch
// builds; elsewhere asking for a profile is an error, not a silent no-op.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::trainer {

class StepProfiler {
 public:
  // Profiles steps [start, start + steps) into `path`; steps = 0: does nothing.
  StepProfiler(int64_t start, int64_t steps, std::string path);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void before_step(int64_t step);
  // After the window's last step: waits for the device and writes the trace.
  void after_step(int64_t step);

 private:
  int64_t start_;
  int64_t end_;
  std::string path_;
  bool running_ = false;
};

}  // namespace dtrain::trainer
