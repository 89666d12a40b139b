// Checkpoints: one directory per step, written under a temporary name and renamed once
// complete (with a DONE marker), so a crash mid-write never damages the last good one.
//   <dir>/step_00000100/{model.pt, <the strategy's files>, state.toml, config.toml, DONE}
// model.pt is a plain state dict that Python's torch.load reads (torchvision names); the
// strategy's files are its optimizer state (dist/optimizer_state.h: optimizer.pt, or one file
// per rank of a sharded strategy) and whatever else it keeps. Every worker writes, on a file
// system they share:
//   1. rank 0 creates step_N.tmp (replacing one an interrupted save left);
//   2. every worker writes its own part into it (Strategy::save_partition);
//   3. rank 0 writes model.pt, the strategy's own files (Strategy::save), state.toml,
//      config.toml and DONE, then renames step_N.tmp to step_N.
// Between the steps the workers agree that each did its part (a collective, bounded by
// dist.timeout_s like every other): a rank that fails fails every rank once the others reach
// that point, none waits alone, and the newest complete checkpoint stays the previous one
// (step_N.tmp is removed by the next save or the next run).
#pragma once

#include "dist/strategy.h"

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::trainer {

// state.toml: where the run was and the shape it had, which a resumed run compares with its
// own. The shape fields are 0 in checkpoints written before they existed.
struct CheckpointInfo {
  int64_t step = 0;   // optimizer steps completed
  int64_t epoch = 0;  // epoch the next step belongs to
  std::string strategy;          // the strategy that wrote it
  int64_t world_size = 0;       // ranks that took data
  int64_t global_batch = 0;     // samples per optimizer step, over all ranks
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;      // the run's length: finished when step == total_steps
  double train_seconds = 0.0;   // training time up to `step`, over every session of the run
  // The newest evaluation up to `step`; NaN when there was none.
  double test_accuracy = std::numeric_limits<double>::quiet_NaN();
  double test_loss = std::numeric_limits<double>::quiet_NaN();
  // The logging interval (run.log_every) that `step` falls inside: its first step, its
  // training losses summed so far (the workers' mean) and its steps skipped for a NaN loss, so
  // that a resumed run logs the interval's loss as an uninterrupted one would.
  // interval_first_step == step where the interval was just logged (and in older checkpoints).
  int64_t interval_first_step = 0;
  double interval_loss_sum = 0.0;
  int64_t interval_skipped = 0;
};

// Whether every floating tensor of `state` is finite (one host sync): the trainer checkpoints
// no weights that hold NaN or Inf.
bool all_finite(const dist::NamedTensors& state);

class Checkpointer {
 public:
  // keep: complete checkpoints kept; older ones are deleted after each save.
  Checkpointer(std::string dir, int64_t keep);

  // Whether every worker passed true. Blocking, collective over the workers.
  using AllAgree = std::function<bool(bool)>;

  // Writes the checkpoint of `info.step` by the protocol above (blocking; every worker, after
  // Strategy::prepare_checkpoint(); `rank` is its place among the workers): `model_state` (the
  // strategy's consolidated model state, which rank 0 writes) and the strategy's own state.
  // `config_toml` is the resolved config. Throws on every worker if one fails.
  void save(const CheckpointInfo& info, const dist::NamedTensors& model_state,
            dist::Strategy& strategy, const std::string& config_toml, int rank,
            const AllAgree& all_agree) const;
  // Throws UserError unless checkpoints can be written into the directory (a probe directory
  // made and removed there, or in the run directory where none exists yet): a read-only mount
  // is found before the first step, not at the first checkpoint. Rank 0.
  void check_writable() const;
  // The complete checkpoint directories in `dir`, newest first.
  std::vector<std::string> complete() const;
  // The newest complete checkpoint directory in `dir`, if any.
  std::optional<std::string> latest() const;
  // Deletes what interrupted saves left behind (step_*.tmp directories). Rank 0.
  void remove_partial() const;
  // Renames each step_N directory without its DONE (not one an interrupted save left: those
  // end in .tmp) to step_N.unloadable with a warning, so that a later save at that step does
  // not replace it unannounced. Rank 0.
  void set_aside_incomplete() const;
  // Renames the complete checkpoint `path` of this directory, one that does not load, to
  // `path`.unloadable: kept for a look, but no longer offered to --resume or counted by
  // keep_checkpoints, which would otherwise delete the older checkpoint the run resumed from
  // and keep it. Rank 0.
  void set_aside(const std::string& path) const;

  // Reads checkpoint `path`'s state.toml; throws UserError naming the file.
  static CheckpointInfo read_info(const std::string& path);
  // Restores model and strategy state through the strategy (every rank). Throws UserError,
  // one line naming the file, on an incomplete, damaged or foreign checkpoint. A rank that
  // fails skips the rest: Strategy::load_model_state() and load() must not communicate.
  static CheckpointInfo load(const std::string& path, dist::Strategy& strategy);

 private:
  void prune() const;

  std::string dir_;
  int64_t keep_;
};

}  // namespace dtrain::trainer
