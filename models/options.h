// Options of the model registry (config section [model]), each key declared in declare().
#pragma once

#include "common/error.h"
#include "common/option_spec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::models {

// The architectures make_model() builds (models/registry.h), in the order the help lists them.
std::vector<std::string> model_names();

struct ModelOptions {
  // "simple_cnn", "resnet18", "resnet34" or "resnet50".
  std::string name = "simple_cnn";
  // 0: take the dataset's number of classes.
  int64_t num_classes = 0;
  // ResNet stem: "auto" picks "small" for inputs up to 64 px, else "imagenet".
  // "imagenet": 7x7/2 conv + 3x3/2 max-pool (torchvision). "small": 3x3/1 conv, no pool.
  std::string stem = "auto";
  // Zero-init the last BatchNorm gamma of every residual block (Goyal et al. 2017).
  bool zero_init_residual = false;
  // SimpleCNN width (channels of the first conv; the second has twice as many).
  int64_t width = 32;
  // SyncBatchNorm: BatchNorm layers normalise with the global batch's statistics, over all
  // ranks, in training (dist/sync_batchnorm.h); no effect on one rank.
  bool sync_batchnorm = false;

  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
};

}  // namespace dtrain::models
