// open_dataset(), open_splits(), the checks every file-based dataset shares, and the
// synthetic dataset.
#include "data/dataset.h"

#include "common/error.h"
#include "data/random.h"
#include "data/readers.h"
#include "data/sampler.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <system_error>

namespace dtrain::data {

namespace fs = std::filesystem;

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

std::string dataset_hint(const std::string& name) {
  if (name == "fashion_mnist") {
    return "install Debian package dataset-fashion-mnist, or set data.path to a folder holding "
           "the Fashion-MNIST IDX files";
  }
  if (name == "mnist") {
    return "download the four MNIST IDX files (gzip or plain) into a folder and set data.path "
           "to it";
  }
  if (name == "cifar10") {
    return "unpack the CIFAR-10 binary version (cifar-10-binary.tar.gz) and set data.path to "
           "its folder";
  }
  return "set data.path to the folder holding train/ and val/, one sub-folder per class in each";
}

std::string count_of(int64_t count, const std::string& noun) {
  return fmt::format("{} {}{}", count, noun, count == 1 ? "" : "s");
}

std::string folder_problem(const std::string& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (status.type() == fs::file_type::not_found) return "does not exist";
  if (error) return "cannot be read: " + error.message();
  if (status.type() == fs::file_type::regular) return "not a folder (it is a file)";
  if (status.type() != fs::file_type::directory) return "not a folder";
  return "";
}

void Dataset::stage(int64_t index, uint64_t seed, StagedSample& out) const {
  DTRAIN_CHECK(false, "stage() of a dataset whose samples are not staged");
}

std::unique_ptr<Dataset> open_dataset(const DataOptions& options, Split split) {
  const std::string& name = options.dataset;
  if (name == "synthetic") return open_synthetic(options);
  const bool idx = name == "fashion_mnist" || name == "mnist";
  if (!idx && name != "cifar10" && name != "image_folder") {
    throw UserError(
        fmt::format("data.dataset \"{}\" is not one of: {}", name, dataset_names()));
  }
  // Said once here, so that no reader reports a missing file inside a folder that is not one.
  const std::string problem = folder_problem(options.path);
  if (!problem.empty()) {
    throw UserError(fmt::format("data.path \"{}\": {}; {}", options.path, problem,
                                dataset_hint(name)));
  }
  if (idx) return open_idx(options, split);
  if (name == "cifar10") return open_cifar10(options, split);
  return open_image_folder(options, split);
}

Splits open_splits(const DataOptions& options) {
  Splits splits;
  splits.train = open_dataset(options, Split::kTrain);
  if (splits.train->on_device()) return splits;
  splits.test = open_dataset(options, Split::kTest);
  const SampleShape train = splits.train->shape();
  const SampleShape test = splits.test->shape();
  if (train.channels != test.channels || train.height != test.height ||
      train.width != test.width) {
    throw UserError(fmt::format(
        "data.path \"{}\" ({}): the test split's images are {}x{}x{} but the training "
        "split's are {}x{}x{} (channels x height x width); one model takes both, so both "
        "splits must come from the same release of the dataset",
        options.path, options.dataset, test.channels, test.height, test.width, train.channels,
        train.height, train.width));
  }
  if (splits.train->num_classes() != splits.test->num_classes()) {
    throw UserError(fmt::format("data.path \"{}\" ({}): the test split has {} classes but the "
                                "training split has {}; both splits need the same classes",
                                options.path, options.dataset, splits.test->num_classes(),
                                splits.train->num_classes()));
  }
  return splits;
}

}  // namespace dtrain::data
