// The training run: builds model, data, optimizer and strategy from the Config, trains by
// epochs or max_steps, evaluates, checkpoints and resumes.
#pragma once

#include "trainer/options.h"

#include <optional>
#include <string>

namespace dtrain::trainer {

struct RunFlags {
  // Resume: "" = the newest complete checkpoint of this run, if any; else that directory.
  std::optional<std::string> resume;
  // Build everything, print the plan, train nothing.
  bool dry_run = false;
};

struct RunResult {
  int64_t steps = 0;
  double test_accuracy = 0.0;  // NaN when not evaluated
  double test_loss = 0.0;
  double train_seconds = 0.0;
};

RunResult run_training(const Config& config, const RunFlags& flags);

}  // namespace dtrain::trainer
