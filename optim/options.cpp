#include "optim/options.h"

#include "common/options_check.h"

namespace dtrain::optim {

FieldErrors OptimizerOptions::validate() const {
  FieldErrors errors;
  check_one_of(errors, "name", name, {"sgd", "adamw", "lars", "lamb"});
  check_range(errors, "lr", lr, 0.0, 1e3);
  check_range(errors, "momentum", momentum, 0.0, 1.0);
  check_at_least(errors, "weight_decay", weight_decay, 0.0);
  check_range(errors, "beta1", beta1, 0.0, 1.0);
  check_range(errors, "beta2", beta2, 0.0, 1.0);
  check_range(errors, "eps", eps, 0.0, 1.0);
  check_range(errors, "trust_coefficient", trust_coefficient, 1e-9, 1e3);
  check_range(errors, "trust_eps", trust_eps, 0.0, 1.0);
  check_at_least(errors, "max_trust_ratio", max_trust_ratio, 0.0);
  check_at_least(errors, "max_grad_norm", max_grad_norm, 0.0);
  if (name == "lars" && momentum >= 1.0) {
    errors.push_back({"momentum", "must be below 1 for lars"});
  }
  if (name == "lamb" && (beta1 >= 1.0 || beta2 >= 1.0)) {
    errors.push_back({beta1 >= 1.0 ? "beta1" : "beta2", "must be below 1 for lamb"});
  }
  if (nesterov && (name != "sgd" || momentum <= 0.0)) {
    errors.push_back({"nesterov", "needs name = \"sgd\" and momentum > 0"});
  }
  return errors;
}

FieldErrors ScheduleOptions::validate() const {
  FieldErrors errors;
  check_one_of(errors, "decay", decay, {"cosine", "poly", "step", "constant"});
  check_at_least(errors, "warmup_epochs", warmup_epochs, 0.0);
  check_range(errors, "warmup_start_factor", warmup_start_factor, 0.0, 1.0);
  check_range(errors, "gamma", gamma, 0.0, 1.0);
  check_at_least(errors, "min_lr", min_lr, 0.0);
  check_range(errors, "power", power, 1e-3, 100.0);
  for (size_t i = 0; i < milestones.size(); ++i) {
    if (milestones[i] < 1 || (i > 0 && milestones[i] <= milestones[i - 1])) {
      errors.push_back({"milestones", "must be increasing epochs >= 1"});
      break;
    }
  }
  return errors;
}

}  // namespace dtrain::optim
