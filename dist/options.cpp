#include "dist/options.h"

#include "common/options_check.h"

namespace dtrain::dist {

FieldErrors DistOptions::validate() const {
  FieldErrors errors;
  check_one_of(errors, "strategy", strategy, {"single"});
  check_range(errors, "timeout_s", timeout_s, 1.0, 86400.0);
  return errors;
}

}  // namespace dtrain::dist
