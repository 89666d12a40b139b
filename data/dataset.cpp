// open_dataset() and the synthetic dataset.
#include "data/dataset.h"

#include "common/error.h"
#include "data/random.h"
#include "data/readers.h"
#include "data/sampler.h"

#include <fmt/format.h>

#include <cmath>

namespace dtrain::data {

namespace {

// Standard normal images and uniform labels. The loader never calls get() for it (it makes
// one batch on the device instead); get() exists so that CPU code paths and tests work.
class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(const DataOptions& options)
      : size_(options.synthetic_samples), classes_(options.synthetic_classes),
        shape_{options.synthetic_channels, options.synthetic_image_size,
               options.synthetic_image_size} {}

  int64_t size() const override { return size_; }
  int64_t num_classes() const override { return classes_; }
  SampleShape shape() const override { return shape_; }
  bool on_device() const override { return true; }

  // A fixed dataset: sample `index` depends on the index alone (no augmentation, so the
  // per-epoch seed is ignored). Box-Muller on xoshiro256** uniforms.
  int64_t get(int64_t index, float* out, uint64_t /*seed*/) const override {
    constexpr uint64_t kSalt = 0x73796e7468657469ULL;  // "synthetic"
    Rng rng(mix_seed(kSalt, static_cast<uint64_t>(index)));
    const int64_t numel = shape_.numel();
    constexpr double kTwoPi = 6.283185307179586;
    for (int64_t j = 0; j < numel; j += 2) {
      const double radius = std::sqrt(-2.0 * std::log(1.0 - rng.uniform()));
      const double angle = kTwoPi * rng.uniform();
      out[j] = static_cast<float>(radius * std::cos(angle));
      if (j + 1 < numel) out[j + 1] = static_cast<float>(radius * std::sin(angle));
    }
    return static_cast<int64_t>(rng.below(static_cast<uint64_t>(classes_)));
  }

 private:
  int64_t size_;
  int64_t classes_;
  SampleShape shape_;
};

}  // namespace

std::unique_ptr<Dataset> open_synthetic(const DataOptions& options) {
  return std::make_unique<SyntheticDataset>(options);
}

std::string dataset_names() { return "fashion_mnist, mnist, cifar10, image_folder, synthetic"; }

std::unique_ptr<Dataset> open_dataset(const DataOptions& options, Split split) {
  const std::string& name = options.dataset;
  if (name == "fashion_mnist" || name == "mnist") return open_idx(options, split);
  if (name == "cifar10") return open_cifar10(options, split);
  if (name == "image_folder") return open_image_folder(options, split);
  if (name == "synthetic") return open_synthetic(options);
  throw UserError(fmt::format("data.dataset \"{}\" is not one of: {}", name, dataset_names()));
}

}  // namespace dtrain::data
