#include "models/options.h"

namespace dtrain::models {

std::vector<std::string> model_names() {
  return {"simple_cnn", "resnet18", "resnet34", "resnet50"};
}

void ModelOptions::declare(OptionSpecs& keys) {
  keys.add("name", &name,
           "architecture: simple_cnn (two convolutions), or resnet18/34/50 (torchvision layout)")
      .one_of(model_names());
  keys.add("num_classes", &num_classes, "classes (0: the dataset's; else at least the dataset's)")
      .at_least(0);
  keys.add("stem", &stem,
           "ResNet stem: imagenet (7x7/2 + max-pool), small (3x3/1), auto (small up to 64 px)")
      .one_of({"auto", "imagenet", "small"});
  keys.add("zero_init_residual", &zero_init_residual,
           "zero the last BatchNorm gamma of each residual block");
  keys.add("sync_batchnorm", &sync_batchnorm,
           "BatchNorm statistics over the global batch (all ranks) in training; costs one "
           "small all-gather and one small all-reduce per layer and step");
  keys.add("width", &width, "SimpleCNN channels of the first convolution").range(1, 4096);
}

FieldErrors ModelOptions::validate() const { return check_declared(*this); }

}  // namespace dtrain::models
