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
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    // StatType::AGGREGATE, the sum over pools: index 0 (the enum moved namespaces in torch 2).
    const size_t all = 0;
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
