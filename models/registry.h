// Builds a model by name from ModelOptions and the input shape the dataset provides.
#pragma once

#include "models/model.h"
#include "models/options.h"

#include <memory>
#include <vector>

namespace dtrain::models {

struct InputShape {
  int64_t channels;
  int64_t height;
  int64_t width;
};

// Weights are initialised from the global torch RNG: seed it first for reproducible runs.
// `num_classes` is used when options.num_classes is 0.
std::shared_ptr<Model> make_model(const ModelOptions& options, InputShape input,
                                  int64_t num_classes);

}  // namespace dtrain::models
