#include "optim/schedule.h"

#include "common/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace dtrain::optim {
namespace {
constexpr double kPi = 3.14159265358979323846;  // M_PI is not standard C++
}  // namespace

LrSchedule::LrSchedule(ScheduleOptions options, double peak_lr, int64_t steps_per_epoch,
                       int64_t total_steps)
    : options_(std::move(options)),
      peak_lr_(peak_lr),
      steps_per_epoch_(steps_per_epoch),
      total_steps_(total_steps),
      warmup_steps_(std::llround(options_.warmup_epochs * static_cast<double>(steps_per_epoch))) {
  DTRAIN_CHECK(steps_per_epoch > 0, "steps_per_epoch {} must be positive", steps_per_epoch);
  DTRAIN_CHECK(total_steps >= 0, "total_steps {} must not be negative", total_steps);
  if (options_.decay != "cosine" && options_.decay != "poly" && options_.decay != "step" &&
      options_.decay != "constant") {
    throw UserError(fmt::format(
        "schedule.decay \"{}\" is not one of: cosine, poly, step, constant", options_.decay));
  }
}

std::vector<std::string> LrSchedule::unreached() const {
  std::vector<std::string> lines;
  if (warmup_steps_ > total_steps_) {
    lines.push_back(fmt::format(
        "schedule.warmup_epochs = {} is {} steps, longer than the run's {}: the learning rate "
        "ends at {:.3g}, never reaching optim.lr = {}",
        options_.warmup_epochs, warmup_steps_, total_steps_,
        lr_at(std::max<int64_t>(total_steps_ - 1, 0)), peak_lr_));
  }
  if (options_.decay == "step") {
    for (const int64_t milestone : options_.milestones) {
      if (milestone * steps_per_epoch_ < total_steps_) continue;
      lines.push_back(fmt::format(
          "schedule.milestones: epoch {} (step {}) is past the run's last step, {}: its decay "
          "never applies",
          milestone, milestone * steps_per_epoch_, total_steps_ - 1));
    }
  }
  return lines;
}

double LrSchedule::lr_at(int64_t step) const {
  DTRAIN_CHECK(step >= 0, "step {} must not be negative", step);
  if (step < warmup_steps_) {
    // Linear from peak * start_factor at step 0 to peak at step warmup_steps (Goyal et al. 2017).
    const double progress = static_cast<double>(step) / static_cast<double>(warmup_steps_);
    const double factor = options_.warmup_start_factor;
    return peak_lr_ * (factor + (1.0 - factor) * progress);
  }
  if (options_.decay == "step") {
    // x gamma for every milestone epoch already reached.
    double lr = peak_lr_;
    for (const int64_t milestone : options_.milestones) {
      if (milestone * steps_per_epoch_ <= step) lr *= options_.gamma;
    }
    return lr;
  }
  if (options_.decay == "cosine") {
    // SGDR without restarts (Loshchilov & Hutter 2017, eq. 5):
    //   lr = min + (peak - min) * (1 + cos(pi * t / T)) / 2, t = step - warmup, T = total - warmup.
    // A run no longer than its warmup never decays; steps past the end stay at min_lr.
    const int64_t decay_steps = total_steps_ - warmup_steps_;
    if (decay_steps <= 0) return peak_lr_;
    const double t = static_cast<double>(std::min(step - warmup_steps_, decay_steps));
    const double cosine = 0.5 * (1.0 + std::cos(kPi * t / static_cast<double>(decay_steps)));
    return options_.min_lr + (peak_lr_ - options_.min_lr) * cosine;
  }
  if (options_.decay == "poly") {
    // Polynomial decay (You et al. 2017, LARS; MLPerf ResNet-50):
    //   lr = min + (peak - min) * (1 - t / T)^power, t = step - warmup, T = total - warmup.
    // As for the cosine: no decay without steps after warmup; min_lr past the end.
    const int64_t decay_steps = total_steps_ - warmup_steps_;
    if (decay_steps <= 0) return peak_lr_;
    const double t = static_cast<double>(std::min(step - warmup_steps_, decay_steps));
    const double remaining = 1.0 - t / static_cast<double>(decay_steps);
    return options_.min_lr + (peak_lr_ - options_.min_lr) * std::pow(remaining, options_.power);
  }
  return peak_lr_;  // "constant"
}

}  // namespace dtrain::optim
