#include "models/options.h"

#include "common/options_check.h"
#include "models/registry.h"

namespace dtrain::models {

FieldErrors ModelOptions::validate() const {
  FieldErrors errors;
  check_one_of(errors, "name", name, model_names());
  check_at_least<int64_t>(errors, "num_classes", num_classes, 0);
  check_one_of(errors, "stem", stem, {"auto", "imagenet", "small"});
  check_range<int64_t>(errors, "width", width, 1, 4096);
  return errors;
}

}  // namespace dtrain::models
