#include "data/crop_plan.h"

#include <cmath>
#include <cstdint>

namespace dtrain::data {
namespace {

// The region resized to size x size, the whole of it the sample.
CropPlan resize_whole(ImageRegion region, int size) {
  CropPlan plan;
  plan.region = region;
  plan.geometry.height = region.height;
  plan.geometry.width = region.width;
  plan.geometry.resized_height = size;
  plan.geometry.resized_width = size;
  return plan;
}

}  // namespace

CropPlan plan_random_resized_crop(int height, int width, int size, Rng& rng) {
  const double area = static_cast<double>(height) * width;
  const double min_ratio = 3.0 / 4.0;
  const double max_ratio = 4.0 / 3.0;
  CropPlan plan;
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target = area * rng.uniform(0.08, 1.0);
    const double ratio = std::exp(rng.uniform(std::log(min_ratio), std::log(max_ratio)));
    const auto w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    const auto h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const auto top = static_cast<int>(rng.below(static_cast<uint64_t>(height - h + 1)));
      const auto left = static_cast<int>(rng.below(static_cast<uint64_t>(width - w + 1)));
      plan = resize_whole({top, left, h, w}, size);
      found = true;
    }
  }
  if (!found) {
    int w = width;
    int h = height;
    const double in_ratio = static_cast<double>(width) / height;
    if (in_ratio < min_ratio) {
      h = static_cast<int>(std::lround(w / min_ratio));
    } else if (in_ratio > max_ratio) {
      w = static_cast<int>(std::lround(h * max_ratio));
    }
    plan = resize_whole({(height - h) / 2, (width - w) / 2, h, w}, size);
  }
  plan.geometry.flip = rng.below(2) == 1 ? 1 : 0;
  return plan;
}

CropPlan plan_center_crop(int height, int width, int size, double fraction) {
  const auto shorter = static_cast<int>(std::nearbyint(size / fraction));
  int resized_width = shorter;
  int resized_height = shorter;
  if (width <= height) {
    resized_height = static_cast<int>(static_cast<int64_t>(shorter) * height / width);
  } else {
    resized_width = static_cast<int>(static_cast<int64_t>(shorter) * width / height);
  }
  CropPlan plan;
  plan.region = {0, 0, height, width};
  plan.geometry.height = height;
  plan.geometry.width = width;
  plan.geometry.resized_height = resized_height;
  plan.geometry.resized_width = resized_width;
  plan.geometry.top = static_cast<int>(std::nearbyint((resized_height - size) / 2.0));
  plan.geometry.left = static_cast<int>(std::nearbyint((resized_width - size) / 2.0));
  return plan;
}

}  // namespace dtrain::data
