// The last stage of image samples (data/resample.h) for a whole batch on a CUDA device: the
// decoded regions cross PCIe on a copy stream of their own, so the copy runs beside the
// kernels still queued for the previous step instead of after them, and one kernel launch on
// the current stream finishes the batch. No host synchronisation.
#pragma once

#include <torch/torch.h>

namespace dtrain::data {

// Whether this build has the kernel (it needs nvcc when dtrain is built).
bool can_resample_on_device();

// `pixels`: the batch's regions, uint8 in pinned host memory; `geometry`: n ResampleGeometry as
// bytes (uint8 [n * sizeof(ResampleGeometry)]), pinned too. Returns float32 [n, 3, size, size]
// on `device`, normalised with imagenet_normalisation(), in channels_last memory format if
// asked, ready in stream order on the current stream.
torch::Tensor resample_on_device(const torch::Tensor& pixels, const torch::Tensor& geometry,
                                 const torch::Device& device, int64_t size, bool channels_last);

}  // namespace dtrain::data
