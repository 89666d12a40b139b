// The last stage of image samples (data/resample.h) for a whole batch on a CUDA device: one
// kernel launch, the training kernels' stream, no host synchronisation.
#pragma once

#include <torch/torch.h>

namespace dtrain::data {

// Whether this build has the kernel (it needs nvcc when dtrain is built).
bool can_resample_on_device();

// `pixels`: the batch's regions, uint8 on the device; `geometry`: n ResampleGeometry as bytes
// (uint8 [n * sizeof(ResampleGeometry)]) on the same device. Returns float32
// [n, 3, size, size] normalised with imagenet_normalisation(), in channels_last memory format
// if asked. Queued on the current stream.
torch::Tensor resample_on_device(const torch::Tensor& pixels, const torch::Tensor& geometry,
                                 int64_t size, bool channels_last);

}  // namespace dtrain::data
