#include "trainer/profiler.h"

#include "common/error.h"
#include "common/log.h"

#ifdef DTRAIN_CUDA
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#endif

#include <utility>

namespace dtrain::trainer {

#ifdef DTRAIN_CUDA
namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;

profiler::ProfilerConfig kineto_config() {
  return profiler::ProfilerConfig(profiler::ProfilerState::KINETO, /*report_input_shapes=*/false,
                                  /*profile_memory=*/false);
}

// The GPU's activity only: tracing every CPU operator too slows a ResNet-50 step from 30 to
// about 50 ms on an H200 machine, which starves the GPU and hides the gaps worth finding.
const std::set<ActivityType> kActivities = {ActivityType::CUDA};

}  // namespace
#endif

StepProfiler::StepProfiler(int64_t start, int64_t steps, std::string path)
    : start_(start), end_(start + steps), path_(std::move(path)) {
#ifndef DTRAIN_CUDA
  if (steps > 0) {
    throw UserError(
        "run.profile_steps: profiling needs a LibTorch with Kineto (the CUDA builds); this one "
        "has none: set run.profile_steps = 0");
  }
#endif
}

StepProfiler::~StepProfiler() {
#ifdef DTRAIN_CUDA
  if (running_) profiler::disableProfiler();  // training ended inside the window
#endif
}

void StepProfiler::before_step(int64_t step) {
#ifdef DTRAIN_CUDA
  if (step != start_ || end_ == start_) return;
  profiler::prepareProfiler(kineto_config(), kActivities);
  profiler::enableProfiler(kineto_config(), kActivities);
  running_ = true;
#else
  (void)step;
#endif
}

void StepProfiler::after_step(int64_t step) {
#ifdef DTRAIN_CUDA
  if (!running_ || step + 1 != end_) return;
  if (torch::cuda::is_available()) torch::cuda::synchronize();
  std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
  running_ = false;
  result->save(path_);
  log::info("profile of steps {}-{} written to {}", start_, end_ - 1, path_);
#else
  (void)step;
#endif
}

}  // namespace dtrain::trainer
