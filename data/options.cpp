#include "data/options.h"

#include <fmt/format.h>

namespace dtrain::data {

namespace {

// Far above any batch a rank can hold, and low enough that batch sizes times world sizes and
// steps stay far from int64's limits (2^63 overflowed the sampler's arithmetic).
constexpr int64_t kMaxBatch = int64_t{1} << 20;

}  // namespace

void DataOptions::declare(OptionSpecs& keys) {
  keys.add("dataset", &dataset,
           "fashion_mnist or mnist (IDX files), cifar10 (binary batches), image_folder (a "
           "sub-folder per class), synthetic")
      .one_of({"fashion_mnist", "mnist", "cifar10", "image_folder", "synthetic"});
  keys.add("path", &path, "directory holding the dataset files (image_folder: train/ and val/)");
  keys.add("batch_size", &batch_size,
           "images per rank per micro-step (global = batch_size x world x grad_accum)")
      .range(1, kMaxBatch);
  keys.add("eval_batch_size", &eval_batch_size, "evaluation images per rank")
      .range(1, kMaxBatch);
  keys.add("num_workers", &num_workers,
           "loader threads per rank (0: load on the training thread)")
      .range(0, 256);
  keys.add("prefetch", &prefetch, "batches prepared ahead of training").range(1, 1024);
  keys.add("shuffle", &shuffle, "reshuffle the training set every epoch");
  keys.add("augment", &augment,
           "training augmentation: random crops and flips (MNIST: crops only)");
  keys.add("image_size", &image_size, "image_folder: training crop side in pixels")
      .range(8, 4096);
  keys.add("center_crop_fraction", &center_crop_fraction,
           "image_folder: evaluation resizes the shorter side to image_size / this and "
           "center-crops image_size (0.875: torchvision's 256 -> 224; 1: no margin)")
      .range(0.5, 1);
  keys.add("skip_bad_images", &skip_bad_images,
           "image_folder: leave out truncated or non-JPEG/PNG files when the dataset is opened "
           "(logged with their count) instead of stopping at the first one loaded");
  keys.add("image_transform", &image_transform,
           "image_folder: where decoded images are resized, cropped, flipped and normalised: "
           "device (a CUDA kernel per batch), host (the loader threads), auto (device on a "
           "CUDA device)")
      .one_of({"auto", "host", "device"});
  keys.add("synthetic_samples", &synthetic_samples, "synthetic: samples per epoch").at_least(1);
  keys.add("synthetic_classes", &synthetic_classes, "synthetic: classes").at_least(2);
  keys.add("synthetic_channels", &synthetic_channels, "synthetic: image channels").range(1, 64);
  keys.add("synthetic_image_size", &synthetic_image_size, "synthetic: image side in pixels")
      .range(8, 4096);
}

FieldErrors DataOptions::validate() const {
  FieldErrors errors = check_declared(*this);
  // The default path holds Fashion-MNIST, whose files MNIST's share the names of: another
  // dataset left at it would train on Fashion-MNIST without a word, or fail to find its files.
  if (dataset != "fashion_mnist" && dataset != "synthetic" && path == DataOptions{}.path) {
    errors.push_back({"path", fmt::format("{} is Fashion-MNIST's directory (the default); "
                                          "data.dataset = \"{}\" needs the directory of its "
                                          "own files",
                                          path, dataset)});
  }
  return errors;
}

}  // namespace dtrain::data
