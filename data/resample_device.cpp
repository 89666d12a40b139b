#include "data/resample_device.h"

#include "common/error.h"
#include "data/resample.h"

#ifdef DTRAIN_CUDA_KERNELS
#include "data/resample_cuda.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <unordered_map>
#endif

namespace dtrain::data {

bool can_resample_on_device() {
#ifdef DTRAIN_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

torch::Tensor resample_on_device(const torch::Tensor& pixels, const torch::Tensor& geometry,
                                 const torch::Device& device, int64_t size, bool channels_last) {
  DTRAIN_CHECK(pixels.scalar_type() == torch::kUInt8 && geometry.scalar_type() == torch::kUInt8 &&
                   geometry.numel() % static_cast<int64_t>(sizeof(ResampleGeometry)) == 0,
               "pixels {} and geometry {} of {} bytes", pixels.toString(), geometry.toString(),
               geometry.numel());
  const int64_t n = geometry.numel() / static_cast<int64_t>(sizeof(ResampleGeometry));
  const auto layout = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  torch::Tensor images = torch::empty(
      {n, 3, size, size},
      torch::TensorOptions().device(device).dtype(torch::kFloat32).memory_format(layout));
  if (n == 0) return images;  // a rank's empty last evaluation batch: nothing was pinned
  DTRAIN_CHECK(device.is_cuda() && pixels.is_pinned() && geometry.is_pinned(),
               "resample_on_device: pinned host pixels and geometry to a CUDA device, not {}",
               device.str());
#ifdef DTRAIN_CUDA_KERNELS
  const c10::cuda::CUDAGuard on_device(device);
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream();
  // A copy stream of the calling thread's own per device, so its copies wait for nothing else.
  static thread_local std::unordered_map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  const c10::DeviceIndex index = compute.device_index();
  auto found = streams.find(index);
  if (found == streams.end()) {
    found = streams.emplace(index, c10::cuda::getStreamFromPool(false, index)).first;
  }
  const c10::cuda::CUDAStream copies = found->second;
  torch::Tensor device_pixels;
  torch::Tensor device_geometry;
  at::cuda::CUDAEvent copied;
  {
    const c10::cuda::CUDAStreamGuard on_copies(copies);
    device_pixels = pixels.to(device, /*non_blocking=*/true);
    device_geometry = geometry.to(device, /*non_blocking=*/true);
    copied.record(copies);
  }
  copied.block(compute);
  // Allocated on the copy stream, read on the compute stream: not to be reused before that.
  device_pixels.record_stream(compute);
  device_geometry.record_stream(compute);
  cuda::launch_resample(device_pixels, device_geometry, images);
#else
  DTRAIN_CHECK(false, "this build has no CUDA resampling kernel");
#endif
  return images;
}

}  // namespace dtrain::data
