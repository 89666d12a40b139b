// One thread per output pixel of the batch (all three channels, so the taps are computed
// once), one launch per batch. Every thread of a block works on the same sample, so their
// reads of its geometry are one broadcast.
#include "data/resample.h"
#include "data/resample_cuda.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace dtrain::data::cuda {
namespace {

constexpr int kThreads = 256;

struct OutputStrides {
  int64_t sample, channel, row, column;
};

// Grid: x covers the size x size pixels of a sample, y the samples.
__global__ void resample_kernel(const uint8_t* pixels, const ResampleGeometry* geometry, int size,
                                PixelNormalisation norm, float* out, OutputStrides strides) {
  const int sample = blockIdx.y;
  const ResampleGeometry g = geometry[sample];
  const int pixel = blockIdx.x * blockDim.x + threadIdx.x;
  if (pixel >= size * size) return;
  const int y = pixel / size;
  const int x = pixel - y * size;
  float rgb[3];
  resample_pixel(pixels, g, size, y, x, norm, rgb);
  float* at = out + sample * strides.sample + y * strides.row + x * strides.column;
  for (int c = 0; c < 3; ++c) at[c * strides.channel] = rgb[c];
}

}  // namespace

void launch_resample(const at::Tensor& pixels, const at::Tensor& geometry, at::Tensor& images) {
  const c10::cuda::CUDAGuard guard(images.device());
  const auto n = static_cast<int>(images.size(0));
  const auto size = static_cast<int>(images.size(2));
  const dim3 grid((size * size + kThreads - 1) / kThreads, n);
  const OutputStrides strides{images.stride(0), images.stride(1), images.stride(2),
                              images.stride(3)};
  resample_kernel<<<grid, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      pixels.data_ptr<uint8_t>(), reinterpret_cast<const ResampleGeometry*>(geometry.data_ptr<uint8_t>()),
      size, imagenet_normalisation(), images.data_ptr<float>(), strides);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace dtrain::data::cuda
