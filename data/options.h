// Options of the data pipeline (config section [data]), each key declared in declare().
#pragma once

#include "common/error.h"
#include "common/option_spec.h"

#include <cstdint>
#include <string>

namespace dtrain::data {

struct DataOptions {
  // "fashion_mnist" or "mnist" (IDX files), "cifar10" (binary batches),
  // "image_folder" (one sub-folder per class, JPEG/PNG via OpenCV), "synthetic".
  std::string dataset = "fashion_mnist";
  // Directory holding the dataset files (image_folder: holding train/ and val/).
  std::string path = "/usr/share/datasets/fashion-mnist";
  // Images per rank per micro-step. Global batch = batch_size x world x grad_accum.
  int64_t batch_size = 128;
  // Evaluation batch per rank.
  int64_t eval_batch_size = 512;
  // Loader threads decoding and augmenting; 0 prepares batches on the training thread.
  int64_t num_workers = 2;
  // Batches prepared ahead of the one being trained on (bounds host memory).
  int64_t prefetch = 4;
  // Shuffle the training set every epoch (seeded: same order for any world size).
  bool shuffle = true;
  // Training augmentation: random crop of the image padded by 4 pixels + flip (CIFAR-10),
  // padded by 2 + flip (Fashion-MNIST), padded by 2 without flips (MNIST: a mirrored digit is
  // another glyph), random-resized-crop + flip (image folder).
  bool augment = true;
  // image_folder: side of the square training crop; evaluation resizes the shorter side to
  // image_size / center_crop_fraction and center-crops this size.
  int64_t image_size = 224;
  // image_folder: the evaluation crop's share of the resized shorter side (also training's
  // transform when augment is false). 0.875 is torchvision's Resize(256) + CenterCrop(224);
  // 1 resizes the shorter side to image_size, so an image of image_size x image_size (such as
  // Fashion-MNIST's 28x28 at image_size 28) passes through unchanged.
  double center_crop_fraction = 0.875;
  // image_folder: leave out the files that fail the cheap completeness check (signature and
  // end marker) when the dataset is opened, and log how many; false: such a file is an error
  // when it is loaded. Details: data/image_list.h.
  bool skip_bad_images = false;
  // image_folder: where samples are resized, cropped, flipped and normalised once the loader
  // threads have decoded them: "device" (one CUDA kernel per batch, so the threads only
  // decode), "host" (the loader threads), "auto" (device when training on a CUDA device and
  // the build has the kernel, else host). Both give the same samples (data/resample.h).
  std::string image_transform = "auto";
  // synthetic: samples per epoch, classes, channels and image side.
  int64_t synthetic_samples = 1281167;
  int64_t synthetic_classes = 1000;
  int64_t synthetic_channels = 3;
  int64_t synthetic_image_size = 224;

  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
};

}  // namespace dtrain::data
