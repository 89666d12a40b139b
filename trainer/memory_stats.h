// Peak memory of this process, for the metrics: host resident set and, on a CUDA device, what
// PyTorch's caching allocator handed out and held (a strategy's model-state bytes are its
// own stats; these are the totals that decide whether a run fits).
#pragma once

#include "trainer/metrics.h"

#include <torch/torch.h>

namespace dtrain::trainer {

// "memory/host_peak_mb", and on CUDA "memory/device_peak_allocated_mb" and
// "memory/device_peak_reserved_mb", since the process started.
MetricFields peak_memory(torch::Device device);

}  // namespace dtrain::trainer
