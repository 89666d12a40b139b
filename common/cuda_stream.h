// The stream that ATen queues work on for `device` now, through c10's device-independent guard:
// for code that must build without the CUDA headers (a CPU-only LibTorch).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace dtrain {

inline c10::Stream current_cuda_stream(c10::Device device) {
  return c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device);
}

}  // namespace dtrain
