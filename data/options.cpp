#include "data/options.h"

// fmt::join, used by common/options_check.h, moved to fmt/ranges.h in fmt 10 (the fmt that
// LibTorch 2.x brings); it must be declared before that header.
#include <fmt/ranges.h>

#include "common/options_check.h"

namespace dtrain::data {

FieldErrors DataOptions::validate() const {
  FieldErrors errors;
  check_one_of(errors, "dataset", dataset,
               {"fashion_mnist", "mnist", "cifar10", "image_folder", "synthetic"});
  check_at_least<int64_t>(errors, "batch_size", batch_size, 1);
  check_at_least<int64_t>(errors, "eval_batch_size", eval_batch_size, 1);
  check_range<int64_t>(errors, "num_workers", num_workers, 0, 256);
  check_range<int64_t>(errors, "prefetch", prefetch, 1, 1024);
  check_range<int64_t>(errors, "image_size", image_size, 8, 4096);
  check_at_least<int64_t>(errors, "synthetic_samples", synthetic_samples, 1);
  check_at_least<int64_t>(errors, "synthetic_classes", synthetic_classes, 2);
  check_range<int64_t>(errors, "synthetic_channels", synthetic_channels, 1, 64);
  check_range<int64_t>(errors, "synthetic_image_size", synthetic_image_size, 8, 4096);
  return errors;
}

}  // namespace dtrain::data
