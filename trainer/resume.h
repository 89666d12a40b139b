// Resuming a run: the first checkpoint that every rank loads, and what the resumed run changes
// against the run that wrote it.
#pragma once

#include "dist/strategy.h"
#include "trainer/checkpoint.h"
#include "trainer/options.h"
#include "trainer/run_dir.h"

#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

namespace dtrain::trainer {

struct Resumed {
  std::string path;
  CheckpointInfo info;
};

// Loads the first of `from.checkpoints` that loads on every rank of the strategy's data group.
// Collective: one sum of a [ranks] tensor on `device` per checkpoint tried, so that all ranks
// take the same one. Without `from.fall_back`, or when none loads, throws UserError naming the
// file. Nothing when `from` offers no checkpoint. A checkpoint of another optimizer (the
// optim.name of its config.toml, when that loads) is refused in one line, before any loads:
// its state is not this optimizer's.
std::optional<Resumed> load_first_loadable(const ResumeFrom& from, const Config& config,
                                           dist::Strategy& strategy, torch::Device device);

// A run's shape, as far as resuming compares two runs.
struct RunShape {
  Config config;
  int64_t world_size = 0;  // ranks taking data
  int64_t global_batch = 0;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
};

// One line for each difference that changes training from `step` on (ranks, global batch, the
// learning-rate schedule: total steps, schedule keys, optim.lr, steps per epoch), saying what
// it changes.
std::vector<std::string> resume_changes(const RunShape& saved, const RunShape& now, int64_t step);

// Logs a change of strategy (dist::describe_strategy) and resume_changes() against the run that
// wrote `resumed` (its config.toml and state.toml); the latter not when its config.toml does not
// load or its state.toml predates the shape fields.
void warn_resume_changes(const Resumed& resumed, const RunShape& now);

}  // namespace dtrain::trainer
