// Which part of an image a sample takes, decided from the image's size and the sample's seed
// before any pixel is decoded, so that only that part is decoded (data/image_decode.h):
//   training:   torchvision's RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) and
//               RandomHorizontalFlip;
//   evaluation: Resize(round(size / fraction)) and CenterCrop(size).
// The plan's geometry then finishes the sample (data/resample.h), on the host or the device.
#pragma once

#include "data/image_decode.h"
#include "data/random.h"
#include "data/resample.h"

namespace dtrain::data {

struct CropPlan {
  ImageRegion region;         // of the full image, to decode
  ResampleGeometry geometry;  // of that region (offset 0, label 0)
};

// Ten tries at a box of random area and log-uniform aspect ratio, else the centred box of
// clamped ratio; then a coin for the flip. Draws from `rng` in that order.
CropPlan plan_random_resized_crop(int height, int width, int size, Rng& rng);

// The whole image, its shorter side resized to round(size / fraction) (Python rounds half to
// even), and the centred size x size window. At fraction 1 an image of size x size passes
// through unchanged.
CropPlan plan_center_crop(int height, int width, int size, double fraction);

}  // namespace dtrain::data
