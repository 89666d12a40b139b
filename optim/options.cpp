#include "optim/options.h"

#include <fmt/format.h>

namespace dtrain::optim {

namespace {

// Whether optimizer `name` reads key `key`, as make_optimizer (optimizer.cpp) passes them on.
bool optimizer_reads(const std::string& name, const std::string& key) {
  const bool sgd = name == "sgd", adamw = name == "adamw", lars = name == "lars",
             lamb = name == "lamb";
  if (key == "momentum") return sgd || lars;
  if (key == "nesterov") return sgd;
  if (key == "beta1" || key == "beta2" || key == "eps") return adamw || lamb;
  if (key == "adapt_norm_and_bias" || key == "trust_eps" || key == "max_trust_ratio") {
    return lars || lamb;
  }
  if (key == "trust_coefficient") return lars;  // LAMB's ratio is ||w|| / ||r||, no eta
  if (key == "max_grad_norm") return lamb;
  return true;  // name, lr, weight_decay, decay_norm_and_bias: every optimizer
}

}  // namespace

void OptimizerOptions::declare(OptionSpecs& keys) {
  keys.add("name", &name,
           "sgd (momentum, optional Nesterov), adamw, lars (momentum SGD with a layer-wise trust "
           "ratio) or lamb (Adam with a layer-wise trust ratio)")
      .one_of({"sgd", "adamw", "lars", "lamb"});
  keys.add("lr", &lr, "peak learning rate, reached at the end of warmup").range(0.0, 1e3);
  keys.add("momentum", &momentum,
           "sgd and lars: momentum (sgd: of the gradient; lars: of the trust-ratio-scaled step)")
      .range(0.0, 1.0);
  keys.add("nesterov", &nesterov, "sgd: Nesterov momentum (needs momentum > 0)");
  keys.add("weight_decay", &weight_decay,
           "sgd: L2, wd x w added to the gradient; adamw: decoupled, w -= lr x wd x w; lars: wd "
           "x w added to the gradient inside the trust-ratio step (and wd x norm(w) in the "
           "ratio's denominator); lamb: wd x w added to the Adam direction, then scaled by the "
           "trust ratio")
      .at_least(0.0);
  keys.add("decay_norm_and_bias", &decay_norm_and_bias,
           "apply weight decay to 1-D tensors (biases, normalisation) too");
  keys.add("beta1", &beta1, "adamw and lamb: first-moment decay").below(0.0, 1.0);
  keys.add("beta2", &beta2, "adamw and lamb: second-moment decay").below(0.0, 1.0);
  keys.add("eps", &eps,
           "adamw and lamb: epsilon added to sqrt(second moment); 0 = the optimizer's default "
           "(adamw 1e-8, lamb 1e-6)")
      .range(0.0, 1.0);
  keys.add("adapt_norm_and_bias", &adapt_norm_and_bias,
           "lars/lamb: trust-ratio adaptation for 1-D tensors too");
  keys.add("trust_coefficient", &trust_coefficient,
           "lars: eta of the trust ratio eta norm(w) / (norm(g) + wd norm(w) + trust_eps)")
      .range(1e-9, 1e3);
  keys.add("trust_eps", &trust_eps, "lars/lamb: trust-ratio denominator epsilon")
      .range(0.0, 1.0);
  keys.add("max_trust_ratio", &max_trust_ratio,
           "lars/lamb: upper clamp of the trust ratio; 0 = off")
      .at_least(0.0);
  keys.add("max_grad_norm", &max_grad_norm,
           "lamb: global gradient-norm clipping before the moments; 0 = off")
      .at_least(0.0);
}

FieldErrors OptimizerOptions::validate() const {
  FieldErrors errors = check_declared(*this);
  if (name == "lars" && momentum >= 1.0) {
    errors.push_back({"momentum", "must be below 1 for lars"});
  }
  if (nesterov && (name != "sgd" || momentum <= 0.0)) {
    errors.push_back({"nesterov", "needs name = \"sgd\" and momentum > 0"});
  }
  return errors;
}

FieldErrors OptimizerOptions::unused_keys(const std::vector<std::string>& written) const {
  FieldErrors warnings;
  for (const std::string& key : changed_or_written_keys(*this, written)) {
    // nesterov = true under another optimizer is an error already (validate).
    if (key == "nesterov" || optimizer_reads(name, key)) continue;
    warnings.push_back({key, fmt::format("has no effect under optim.name = \"{}\"", name)});
  }
  return warnings;
}

OptimizerOptions OptimizerOptions::resolved() const {
  OptimizerOptions options = *this;
  if (options.eps == 0.0) {
    if (name == "adamw") options.eps = kAdamWEps;
    if (name == "lamb") options.eps = kLambEps;
  }
  return options;
}

void ScheduleOptions::declare(OptionSpecs& keys) {
  keys.add("decay", &decay,
           "after warmup: cosine (to min_lr), poly (to min_lr as (1 - t/T)^power), step "
           "(x gamma at milestones), constant")
      .one_of({"cosine", "poly", "step", "constant"});
  keys.add("warmup_epochs", &warmup_epochs, "linear warmup length in epochs (fractions allowed)")
      .at_least(0.0);
  keys.add("warmup_start_factor", &warmup_start_factor, "warmup starts at lr x this factor")
      .range(0.0, 1.0);
  keys.add("milestones", &milestones, "step decay: epochs where lr x= gamma (increasing)");
  keys.add("gamma", &gamma, "step decay factor").range(0.0, 1.0);
  keys.add("min_lr", &min_lr, "cosine and poly decay floor").at_least(0.0);
  keys.add("power", &power, "poly decay exponent").range(1e-3, 100.0);
}

FieldErrors ScheduleOptions::validate() const {
  FieldErrors errors = check_declared(*this);
  for (size_t i = 0; i < milestones.size(); ++i) {
    if (milestones[i] < 1 || (i > 0 && milestones[i] <= milestones[i - 1])) {
      errors.push_back({"milestones", "must be increasing epochs >= 1"});
      break;
    }
  }
  return errors;
}

}  // namespace dtrain::optim
