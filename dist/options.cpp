#include "dist/options.h"

#include "common/options_check.h"

namespace dtrain::dist {

FieldErrors DdpOptions::validate() const {
  FieldErrors errors;
  check_range(errors, "bucket_mb", bucket_mb, 1e-6, 4096.0);
  check_range(errors, "first_bucket_mb", first_bucket_mb, 1e-6, 4096.0);
  check_one_of(errors, "buffers", buffers, {"broadcast", "average", "local"});
  return errors;
}

FieldErrors ZeroOptions::validate() const {
  FieldErrors errors;
  if (stage != 1) {
    errors.push_back({"stage", "ZeRO stage " + std::to_string(stage) +
                                   " is not available: this version has stage 1 (sharded "
                                   "optimizer state) only"});
  }
  return errors;
}

FieldErrors DistOptions::validate() const {
  FieldErrors errors;
  check_one_of(errors, "strategy", strategy, {"single", "ddp", "zero"});
  check_range(errors, "timeout_s", timeout_s, 1.0, 86400.0);
  for (FieldError& error : ddp.validate()) errors.push_back({"ddp." + error.key, error.problem});
  for (FieldError& error : zero.validate()) errors.push_back({"zero." + error.key, error.problem});
  return errors;
}

}  // namespace dtrain::dist
