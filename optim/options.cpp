#include "optim/options.h"

#include "common/options_check.h"

namespace dtrain::optim {

FieldErrors OptimizerOptions::validate() const {
  FieldErrors errors;
  check_one_of(errors, "name", name, {"sgd", "adamw"});
  check_range(errors, "lr", lr, 0.0, 1e3);
  check_range(errors, "momentum", momentum, 0.0, 1.0);
  check_at_least(errors, "weight_decay", weight_decay, 0.0);
  check_range(errors, "beta1", beta1, 0.0, 1.0);
  check_range(errors, "beta2", beta2, 0.0, 1.0);
  check_range(errors, "eps", eps, 0.0, 1.0);
  if (nesterov && (name != "sgd" || momentum <= 0.0)) {
    errors.push_back({"nesterov", "needs name = \"sgd\" and momentum > 0"});
  }
  return errors;
}

FieldErrors ScheduleOptions::validate() const {
  FieldErrors errors;
  check_one_of(errors, "decay", decay, {"cosine", "step", "constant"});
  check_at_least(errors, "warmup_epochs", warmup_epochs, 0.0);
  check_range(errors, "warmup_start_factor", warmup_start_factor, 0.0, 1.0);
  check_range(errors, "gamma", gamma, 0.0, 1.0);
  check_at_least(errors, "min_lr", min_lr, 0.0);
  for (size_t i = 0; i < milestones.size(); ++i) {
    if (milestones[i] < 1 || (i > 0 && milestones[i] <= milestones[i - 1])) {
      errors.push_back({"milestones", "must be increasing epochs >= 1"});
      break;
    }
  }
  return errors;
}

}  // namespace dtrain::optim
