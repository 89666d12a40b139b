// A run's directory (run.out_dir/run.name): a run never writes into another run's directory,
// and `--resume` finds the checkpoints to continue from. Filesystem only: callable on every
// rank before MPI starts, so a refused run costs nothing and writes nothing.
#pragma once

#include "trainer/options.h"

#include <optional>
#include <string>
#include <vector>

namespace dtrain::trainer {

// run.out_dir/run.name
std::string run_dir_of(const Config& config);

// Whether `dir` holds a run: a config.toml, metrics.jsonl, metrics.csv, train.log or checkpoints/.
bool holds_run(const std::string& dir);

// Throws UserError when this run would write into a directory that holds another run:
// without --resume (`resume` empty) whenever `run_dir` holds a run; with --resume PATH where
// PATH lies outside `run_dir` (a branch from another run's checkpoint), likewise.
void check_run_dir(const std::string& run_dir, const std::optional<std::string>& resume);

// Creates `run_dir` and the folders above it; throws UserError naming run.out_dir where it
// cannot (a path through a file, a read-only or missing mount).
void create_run_dir(const std::string& run_dir);

// Rank 0's hold on its run directory for the run's life, so that a second trainer started on
// it (a stray left running, two sweeps with one name) is refused instead of interleaving the
// metrics and pruning the other's checkpoints. An flock on run_dir/.lock: the kernel lets go
// when the process ends, however it ends. Throws UserError, naming the holder's pid, where
// another process holds it.
class RunDirLock {
 public:
  explicit RunDirLock(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes what a run that never trained wrote into `run_dir`, a directory that held no run
// before: rank 0's config.toml, metrics, train.log and .lock, another rank's
// train.rank<r>.log, then the directory itself if nothing else is left in it. The log file
// must be closed.
void remove_unstarted_run(const std::string& run_dir, int rank);

// The checkpoints `--resume [PATH]` offers, in the order to try them.
struct ResumeFrom {
  std::vector<std::string> checkpoints;  // complete checkpoint directories
  bool fall_back = false;  // on one that does not load, say so and try the next
  std::string where;       // the checkpoints directory searched ("" for a single checkpoint)
};

// `path` empty (bare --resume): the complete checkpoints of `run_dir`, newest first, with
// fall-back; a checkpoint directory: that one alone; a run directory: its complete checkpoints,
// newest first, with fall-back. Throws UserError for a path that is none of these.
ResumeFrom resume_from(const std::string& run_dir, const std::string& path);

}  // namespace dtrain::trainer
