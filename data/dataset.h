// The dataset contract: indexed samples, decoded, transformed and normalised on request.
#pragma once

#include "data/options.h"
#include "data/resample.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::data {

enum class Split { kTrain, kTest };

// A sample whose last stage (data/resample.h) is left to whoever assembles the batch, so that
// it can run on the device: the decoded region and its geometry (offset 0, label set).
struct StagedSample {
  std::vector<uint8_t> pixels;  // HWC RGB, geometry.height x geometry.width x 3
  ResampleGeometry geometry;
};

struct SampleShape {
  int64_t channels;
  int64_t height;
  int64_t width;
  int64_t numel() const { return channels * height * width; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t num_classes() const = 0;
  // Shape of every sample written by get().
  virtual SampleShape shape() const = 0;
  // Writes sample `index` as normalised float32 CHW into out[0, shape().numel()) and returns
  // its label. `seed` drives augmentation, so a sample's transform depends only on
  // (run seed, epoch, index), never on the thread or rank that loads it.
  // Thread-safe: loader workers call it concurrently. Throws UserError on unreadable input.
  virtual int64_t get(int64_t index, float* out, uint64_t seed) const = 0;
  // The data lives on the device already (synthetic): the loader hands out device batches.
  virtual bool on_device() const { return false; }
  // Image datasets whose samples can be finished on the device (3 x H x W RGB of shape(),
  // normalised with imagenet_normalisation()) say so and implement stage(): the sample that
  // get() would write, but for its last stage. Thread-safe like get().
  virtual bool stages_samples() const { return false; }
  virtual void stage(int64_t index, uint64_t seed, StagedSample& out) const;
  // Files left out when the dataset was opened (data.skip_bad_images).
  virtual int64_t num_skipped() const { return 0; }
};

// Opens the dataset named by options.dataset for `split`. Throws UserError naming the folder
// or file and the problem: data.path missing or not a folder, a file missing, truncated or
// corrupt. Files held in memory (IDX, CIFAR-10) are validated here; image-folder files are
// checked as data/image_list.h describes.
std::unique_ptr<Dataset> open_dataset(const DataOptions& options, Split split);

// Both splits: `test` is null when the data lives on the device (synthetic has no test split).
struct Splits {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> test;
};
// Opens the training and test splits and checks that they agree in sample shape and classes
// (one model takes both); throws UserError naming both shapes when they do not.
Splits open_splits(const DataOptions& options);

std::string dataset_names();

}  // namespace dtrain::data
