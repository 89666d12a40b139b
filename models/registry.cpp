#include "models/registry.h"

#include "common/error.h"
#include "common/log.h"
#include "models/resnet.h"
#include "models/simple_cnn.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (fmt >= 10 keeps it here)

namespace dtrain::models {
namespace {

// Config errors reach here only when the caller skipped validate(): report them all at once.
void check_options(const ModelOptions& options) {
  const FieldErrors errors = options.validate();
  if (errors.empty()) return;
  std::vector<std::string> lines;
  for (const auto& error : errors) {
    lines.push_back(fmt::format("model.{}: {}", error.key, error.problem));
  }
  throw UserError(fmt::format("{}", fmt::join(lines, "; ")));
}

void check_input(InputShape input, int64_t num_classes) {
  if (input.channels < 1 || input.height < 8 || input.width < 8) {
    throw UserError(fmt::format("input shape {}x{}x{} is too small: models need at least one "
                                "channel and 8x8 pixels",
                                input.channels, input.height, input.width));
  }
  if (num_classes < 1) {
    throw UserError(fmt::format("num_classes {} must be at least 1; set model.num_classes or use "
                                "a dataset with labels",
                                num_classes));
  }
}

// Options that the chosen model ignores: worth a warning, not an error.
void warn_unused(const ModelOptions& options) {
  if (options.name == "simple_cnn") {
    if (options.stem != "auto") log::warn("model.stem has no effect on simple_cnn");
    if (options.zero_init_residual) {
      log::warn("model.zero_init_residual has no effect on simple_cnn");
    }
  } else if (options.width != ModelOptions{}.width) {
    log::warn("model.width has no effect on {}", options.name);
  }
}

}  // namespace

std::shared_ptr<Model> make_model(const ModelOptions& options, InputShape input,
                                  int64_t num_classes) {
  check_options(options);
  // A head narrower than the labels would fail in the loss, at the first sample beyond it.
  if (options.num_classes > 0 && options.num_classes < num_classes) {
    throw UserError(fmt::format("model.num_classes = {} is fewer than the dataset's {} classes "
                                "(labels 0-{}); set it to {} or more, or to 0 for the dataset's",
                                options.num_classes, num_classes, num_classes - 1, num_classes));
  }
  const int64_t classes = options.num_classes > 0 ? options.num_classes : num_classes;
  check_input(input, classes);
  warn_unused(options);

  if (options.name == "simple_cnn") {
    return std::make_shared<SimpleCNN>(input.channels, options.width, classes);
  }
  ResNetConfig config;
  config.depth = options.name == "resnet18" ? 18 : options.name == "resnet34" ? 34 : 50;
  config.in_channels = input.channels;
  config.num_classes = classes;
  config.small_stem = options.stem == "small" || (options.stem == "auto" && input.height <= 64);
  config.zero_init_residual = options.zero_init_residual;
  return std::make_shared<ResNet>(config);
}

}  // namespace dtrain::models
