#include "trainer/options.h"

#include "common/options_check.h"

namespace dtrain::trainer {

FieldErrors RunOptions::validate() const {
  FieldErrors errors;
  if (name.empty() || name.find('/') != std::string::npos) {
    errors.push_back({"name", "must be a non-empty name without '/'"});
  }
  if (out_dir.empty()) errors.push_back({"out_dir", "must not be empty"});
  check_at_least<int64_t>(errors, "seed", seed, 0);
  check_one_of(errors, "device", device, {"auto", "cpu", "cuda"});
  check_range<int64_t>(errors, "num_threads", num_threads, 0, 1024);
  check_at_least<int64_t>(errors, "log_every", log_every, 1);
  check_at_least<int64_t>(errors, "profile_start", profile_start, 0);
  check_range<int64_t>(errors, "profile_steps", profile_steps, 0, 1000);
  return errors;
}

FieldErrors TrainOptions::validate() const {
  FieldErrors errors;
  check_at_least<int64_t>(errors, "epochs", epochs, 1);
  check_at_least<int64_t>(errors, "max_steps", max_steps, 0);
  check_range<int64_t>(errors, "grad_accum", grad_accum, 1, 4096);
  check_range(errors, "label_smoothing", label_smoothing, 0.0, 0.99);
  check_one_of(errors, "precision", precision, {"fp32", "bf16", "fp16"});
  check_at_least<int64_t>(errors, "eval_every", eval_every, 0);
  check_at_least<int64_t>(errors, "checkpoint_every", checkpoint_every, 0);
  check_at_least<int64_t>(errors, "keep_checkpoints", keep_checkpoints, 0);
  return errors;
}

}  // namespace dtrain::trainer
