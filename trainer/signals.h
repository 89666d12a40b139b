// Stopping a run on a signal: SIGINT, SIGTERM and SIGUSR1 (Slurm's warning before it ends a
// job). The protocol (trainer/train.cpp):
//   1. A handler only records the first signal (StopSignals::received()).
//   2. At its next logging step every rank adds a flag per signal to the reduction that averages
//      the logged loss, so all ranks read the same verdict without a collective of their own;
//      the stop comes at most run.log_every steps after the signal.
//   3. Every rank checkpoints, then waits until rank 0 has written it, and returns
//      stop_exit_code(signal); rank 0 prints resume_command().
// A second SIGINT or SIGTERM, after any stop signal, ends the run at once instead: the handler
// wakes a thread of StopSignals', which runs the `end_at_once` it was given (a handler itself
// may do next to nothing, and a rank must end the job through MPI to end it quietly).
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace dtrain::trainer {

// Installs the handlers for its lifetime and restores the previous ones after. A handler only
// records the first signal. A SIGINT or SIGTERM after it calls `end_at_once(signal)` on a
// thread of its own, which must end the process, so that a user who presses Ctrl-C twice is
// not kept waiting; a third takes the default action, should that thread be stuck. A SIGUSR1
// after it changes nothing: scripts/mpirun.sh may send the ranks one twice.
class StopSignals {
 public:
  using EndAtOnce = std::function<void(int signal)>;
  explicit StopSignals(EndAtOnce end_at_once);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Installs the handlers again, keeping any signal received: what the run's start-up
  // initialises may put its own handlers in place (seen on a GPU machine, where SIGUSR1 then
  // no longer stopped a run alone).
  void reinstall() const;

  // The first signal received while installed, or 0.
  static int received();

 private:
  void wait_for_second();

  EndAtOnce end_at_once_;
  std::thread waiter_;
};

// The signals that stop a run, in the order that picks the one the ranks act on when they
// saw different ones: SIGINT, SIGTERM, SIGUSR1.
const std::vector<int>& stop_signals();

// The signal the user sent, for a stop on `received`: scripts/mpirun.sh stops the ranks with
// SIGUSR1 whatever it got (mpirun would kill them on a SIGINT or SIGTERM) and writes the number
// of the signal it got into the file $DTRAIN_STOP_SIGNAL_FILE. `received` where there is none.
int asked_signal(int received);

// 128 + signal number (130 for SIGINT, 143 for SIGTERM, 138 for SIGUSR1).
int stop_exit_code(int signal);
std::string signal_name(int signal);

// The command line that launched the ranks, a word each, where it can be known: scripts/
// mpirun.sh's ($DTRAIN_LAUNCH_ARGS, its own path then its arguments, a line each), else that of
// the parent process when it is mpirun (mpiexec, orterun, prterun); empty otherwise.
std::vector<std::string> launch_command();

// The command that continues this run: `command` (the trainer's argv) with any --resume
// replaced by a bare --resume at the end. Where `launch` ends in the trainer's arguments, its
// words before them lead (the launcher with all its options: --enable-recovery,
// --oversubscribe, a hostfile); else, with N > 1 ranks, `LAUNCHER -np N`: $DTRAIN_LAUNCHER
// (scripts/mpirun.sh names itself there), else mpirun.
std::string resume_command(const std::vector<std::string>& command, int world_size,
                           const std::vector<std::string>& launch = launch_command());

}  // namespace dtrain::trainer
