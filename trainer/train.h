// The training run: builds model, data, optimizer and strategy from the Config, trains by
// epochs or max_steps, evaluates, checkpoints and resumes, and stops early on a signal.
#pragma once

#include "trainer/options.h"

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtrain::trainer {

struct RunFlags {
  // Resume: "" = the newest checkpoint of this run that loads, if any; else that checkpoint
  // or run directory.
  std::optional<std::string> resume;
  // Build everything, print the plan and the model-state memory per rank, train nothing.
  bool dry_run = false;
  // Dry run: predict the memory for this many ranks instead of this run's world, building
  // only the model (no MPI, no device).
  std::optional<int> world_size;
  // Dry run: also write the memory prediction here as JSON (trainer/memory_plan.h).
  std::string dry_run_json;
  // The command line (argv), for the command that resumes a run stopped by a signal.
  std::vector<std::string> command;
};

struct RunResult {
  int64_t steps = 0;
  double test_accuracy = 0.0;  // NaN when not evaluated
  double test_loss = 0.0;
  double train_seconds = 0.0;  // over every session of the run
  // The signal that stopped the run before its last step (signals.h), or 0.
  int stop_signal = 0;
};

// This rank's part of a failure that another rank reports (a rank whose test data did not
// load): main leaves the report to that rank, which ends the job.
class FailedOnAnotherRank : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws UserError before anything is written when the run directory holds a run and
// `flags` does not resume it.
RunResult run_training(const Config& config, const RunFlags& flags);

}  // namespace dtrain::trainer
