#include "data/resample_device.h"

#include "common/error.h"
#include "data/resample.h"

#ifdef DTRAIN_CUDA_KERNELS
#include "data/resample_cuda.h"
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
                                 int64_t size, bool channels_last) {
  DTRAIN_CHECK(pixels.is_cuda() && geometry.is_cuda() && pixels.device() == geometry.device(),
               "pixels on {} and geometry on {}", pixels.device().str(),
               geometry.device().str());
  DTRAIN_CHECK(pixels.scalar_type() == torch::kUInt8 && geometry.scalar_type() == torch::kUInt8 &&
                   geometry.numel() % static_cast<int64_t>(sizeof(ResampleGeometry)) == 0,
               "pixels {} and geometry {} of {} bytes", pixels.toString(), geometry.toString(),
               geometry.numel());
  const int64_t n = geometry.numel() / static_cast<int64_t>(sizeof(ResampleGeometry));
  auto memory_format = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  torch::Tensor images = torch::empty({n, 3, size, size},
                                      pixels.options().dtype(torch::kFloat32).memory_format(memory_format));
#ifdef DTRAIN_CUDA_KERNELS
  if (n > 0) cuda::launch_resample(pixels, geometry, images);
#else
  DTRAIN_CHECK(false, "this build has no CUDA resampling kernel");
#endif
  return images;
}

}  // namespace dtrain::data
