// Learning-rate schedules in optimizer steps: linear warmup, then cosine, step or constant.
#pragma once

#include "optim/options.h"

#include <cstdint>

namespace dtrain::optim {

class LrSchedule {
 public:
  // `total_steps` is the run's last step; epochs convert to steps by `steps_per_epoch`.
  LrSchedule(ScheduleOptions options, double peak_lr, int64_t steps_per_epoch,
             int64_t total_steps);
  // The learning rate for step `step` (0-based), applied before that step's update.
  double lr_at(int64_t step) const;

 private:
  ScheduleOptions options_;
  double peak_lr_;
  int64_t steps_per_epoch_;
  int64_t total_steps_;
  int64_t warmup_steps_;
};

}  // namespace dtrain::optim
