// Autocast's state by device type, across LibTorch versions: 2.4 replaced the per-backend
// functions (CPU and CUDA, named apart) with ones that take the device type.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <optional>

namespace dtrain {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define DTRAIN_AUTOCAST_BY_DEVICE_TYPE 1
#endif

// Autocast on `device` computing in `dtype`, or off.
inline void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
#ifdef DTRAIN_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  }
#endif
}

// The dtype autocast computes in on `device`, while it is on there.
inline std::optional<at::ScalarType> autocast_dtype(c10::DeviceType device) {
#ifdef DTRAIN_AUTOCAST_BY_DEVICE_TYPE
  if (!at::autocast::is_autocast_enabled(device)) return std::nullopt;
  return at::autocast::get_autocast_dtype(device);
#else
  if (device == c10::DeviceType::CPU) {
    if (!at::autocast::is_cpu_enabled()) return std::nullopt;
    return at::autocast::get_autocast_cpu_dtype();
  }
  if (!at::autocast::is_enabled()) return std::nullopt;
  return at::autocast::get_autocast_gpu_dtype();
#endif
}

}  // namespace dtrain
