// Stopping a run on a signal: SIGINT, SIGTERM and SIGUSR1 (Slurm's warning before it ends a
// job). The protocol (trainer/train.cpp):
//   1. A handler only records the first signal (StopSignals::received()).
//   2. At its next logging step every rank adds a flag per signal to the reduction that averages
//      the logged loss, so all ranks read the same verdict without a collective of their own;
//      the stop comes at most run.log_every steps after the signal.
//   3. Every rank checkpoints, then waits until rank 0 has written it, and returns
//      stop_exit_code(signal); rank 0 prints resume_command().
#pragma once

#include <string>
#include <vector>

namespace dtrain::trainer {

// Installs the handlers for its lifetime and restores the previous ones after. A handler only
// records the signal; a second SIGINT or SIGTERM takes the default action (ends the process),
// so a user who presses Ctrl-C twice is not kept waiting. A second SIGUSR1 changes nothing.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received while installed, or 0.
  static int received();
};

// The signals that stop a run, in the order that picks the one the ranks act on when they
// saw different ones: SIGINT, SIGTERM, SIGUSR1.
const std::vector<int>& stop_signals();

// 128 + signal number (130 for SIGINT, 143 for SIGTERM, 138 for SIGUSR1).
int stop_exit_code(int signal);
std::string signal_name(int signal);

// The command that continues this run: `command` (the trainer's argv) with any --resume
// replaced by a bare --resume at the end, prefixed with `mpirun -np N` when N > 1 ranks.
std::string resume_command(const std::vector<std::string>& command, int world_size);

}  // namespace dtrain::trainer
