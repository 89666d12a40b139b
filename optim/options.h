// Options of the optimizer and the learning-rate schedule (config sections [optim], [schedule]),
// each key declared in declare().
#pragma once

#include "common/error.h"
#include "common/option_spec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::optim {

struct OptimizerOptions {
  // "sgd" (momentum, optional Nesterov), "adamw", "lars" (momentum SGD with layer-wise trust
  // ratio) or "lamb" (Adam with layer-wise trust ratio).
  std::string name = "sgd";
  // Peak learning rate, reached at the end of warmup.
  double lr = 0.1;
  // sgd: b = momentum b + g; lars: the buffer of scaled steps, v = momentum v + lr ratio u.
  double momentum = 0.9;
  // sgd only.
  bool nesterov = false;
  // How each optimizer applies it (optimizer.cpp builds them; lars.h, lamb.h hold the math):
  //   sgd:   L2, g += wd w before the momentum buffer (torch.optim.SGD);
  //   adamw: decoupled, w -= lr wd w beside the Adam step (Loshchilov & Hutter 2019);
  //   lars:  u = g + wd w inside the trust-ratio step, and wd ||w|| in the ratio's denominator;
  //   lamb:  r = Adam direction + wd w, then scaled by the trust ratio ||w|| / ||r||: decoupled
  //          from the moments, but adapted with the step (You et al. 2020, Algorithm 2).
  double weight_decay = 5e-4;
  // Apply weight decay to biases and normalisation parameters (1-D tensors) too.
  bool decay_norm_and_bias = true;
  // adamw and lamb: moment decays, and the epsilon added to sqrt(v hat).
  double beta1 = 0.9;
  double beta2 = 0.999;
  // 0: the chosen optimizer's own default, kAdamWEps or kLambEps (resolved() fills it in, so
  // the saved config shows the value used). Each is its reference's default: torch.optim.AdamW
  // 1e-8; LAMB 1e-6 (You et al. 2020, and NVIDIA apex's FusedLAMB).
  double eps = 0.0;
  static constexpr double kAdamWEps = 1e-8;
  static constexpr double kLambEps = 1e-6;
  // lars/lamb: trust-ratio adaptation for 1-D tensors (biases, normalisation) too; when
  // false they form group 1 and take plain momentum SGD / Adam steps.
  bool adapt_norm_and_bias = false;
  // lars: eta of the trust ratio eta * ||w|| / (||g|| + wd * ||w|| + trust_eps).
  double trust_coefficient = 0.001;
  // lars/lamb: added to the trust ratio's denominator.
  double trust_eps = 0.0;
  // lars/lamb: upper clamp of the trust ratio; 0 = off.
  double max_trust_ratio = 0.0;
  // lamb: clip the global gradient norm to this before the moments; 0 = off.
  double max_grad_norm = 0.0;

  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
  // Keys that the chosen optimizer does not read (optimizer.cpp), of those set to something
  // other than their defaults and those `written` ("momentum"): they have no effect
  // (warnings, not errors).
  FieldErrors unused_keys(const std::vector<std::string>& written = {}) const;
  // These options with every "the optimizer's default" (eps = 0) replaced by the chosen
  // optimizer's value; an optimizer that does not use the key keeps 0.
  OptimizerOptions resolved() const;
};

struct ScheduleOptions {
  // After warmup: "cosine" (to min_lr at the last step), "poly" (min_lr + (lr - min_lr) x
  // (1 - t/T)^power), "step" (x gamma at each milestone epoch) or "constant".
  std::string decay = "cosine";
  // Linear warmup from lr x warmup_start_factor to lr, in epochs (fractions allowed).
  double warmup_epochs = 0.0;
  double warmup_start_factor = 0.1;
  std::vector<int64_t> milestones = {30, 60, 80};
  double gamma = 0.1;
  double min_lr = 0.0;
  // Exponent of the "poly" decay.
  double power = 2.0;

  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
};

}  // namespace dtrain::optim
