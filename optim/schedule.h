// Learning-rate schedules in optimizer steps: linear warmup, then cosine, poly, step or constant.
#pragma once

#include "optim/options.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::optim {

class LrSchedule {
 public:
  // `total_steps`: the number of optimizer steps in the run (steps 0 .. total_steps - 1); the
  // cosine reaches min_lr at step total_steps. Epochs convert to steps by `steps_per_epoch`;
  // warmup lasts round(warmup_epochs * steps_per_epoch) steps. Throws UserError for an
  // unknown decay.
  LrSchedule(ScheduleOptions options, double peak_lr, int64_t steps_per_epoch,
             int64_t total_steps);
  // The learning rate for step `step` (0-based), applied before that step's update.
  double lr_at(int64_t step) const;
  // What of the schedule the run never reaches, a line each: a warmup longer than the run
  // (the rate never gets to peak_lr), step-decay milestones at or past its end.
  std::vector<std::string> unreached() const;

 private:
  ScheduleOptions options_;
  double peak_lr_;
  int64_t steps_per_epoch_;
  int64_t total_steps_;
  int64_t warmup_steps_;
};

}  // namespace dtrain::optim
