// The kernel behind resample_on_device() (data/resample_device.h), built with nvcc.
#pragma once

#include <ATen/Tensor.h>

namespace dtrain::data::cuda {

// Fills `images` [n, 3, size, size] (any strides) from the batch's `pixels` and `geometry`.
void launch_resample(const at::Tensor& pixels, const at::Tensor& geometry, at::Tensor& images);

}  // namespace dtrain::data::cuda
