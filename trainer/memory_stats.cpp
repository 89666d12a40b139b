#include "trainer/memory_stats.h"

#include <sys/resource.h>
#ifdef DTRAIN_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace dtrain::trainer {

MetricFields peak_memory(torch::Device device) {
  constexpr double kMiB = 1 << 20;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  MetricFields fields = {{"memory/host_peak_mb", static_cast<double>(usage.ru_maxrss) / 1024.0}};
#ifdef DTRAIN_CUDA
  if (device.is_cuda()) {
    using c10::cuda::CUDACachingAllocator::StatType;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto all = static_cast<size_t>(StatType::AGGREGATE);
    fields.push_back({"memory/device_peak_allocated_mb",
                      static_cast<double>(stats.allocated_bytes[all].peak) / kMiB});
    fields.push_back({"memory/device_peak_reserved_mb",
                      static_cast<double>(stats.reserved_bytes[all].peak) / kMiB});
  }
#else
  (void)device;
  (void)kMiB;
#endif
  return fields;
}

}  // namespace dtrain::trainer
