// A watchdog for operations the host does not wait on (NCCL kernels in flight): it polls each
// watched operation and, past the deadline, logs which one never completed and ends the job,
// so that no rank waits alone. Two threads: a poller, whose queries (cudaEventQuery) can block
// while the main thread sits in a synchronous CUDA call behind the stuck kernel, and a timer
// that never calls CUDA and so always ends the job at the deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace dtrain::dist {

struct WatchdogHooks {
  // First, on the poller's thread (to select the CUDA device its queries use).
  std::function<void()> on_thread_start;
  // Every poll, on the poller's thread (to answer other ranks' progress queries); optional.
  std::function<void()> on_poll;
  // At a timeout of operation number `sequence`, on the timer's thread: the ranks that have
  // not issued it (ProgressChannel::missing_ranks); optional.
  std::function<std::string(int64_t sequence)> missing_ranks;
  // After a timeout was logged; must not return: it aborts the communicator and the job
  // (should it hang, the process exits on its own).
  std::function<void()> end_job;
};

class Watchdog {
 public:
  Watchdog(double timeout_s, WatchdogHooks hooks);
  // Stops the thread; operations still watched are no longer bounded.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Operations must complete in the order they are watched (one stream, as NCCL's
  // operations on one communicator do): the poller stops at the first one still running.
  //
  // Bounds the operation that `describe()` names (e.g. "all_reduce #7 (1024 x Float)") from
  // now on, until `done()` returns true. The name is formatted only at a timeout: operations
  // are issued thousands of times a second. `done` runs on the poller's thread. `sequence`:
  // the operation's number on the communicator, whose missing ranks a timeout names; 0 for
  // none (set-up). `started` (optional, on the poller's thread too): whether the operation's
  // kernel has started, which a timeout reports (queued behind other work, or waiting for
  // its peers).
  void watch(std::function<std::string()> describe, int64_t sequence,
             std::function<bool()> done, std::function<bool()> started = {});
  void watch(std::string what, int64_t sequence, std::function<bool()> done,
             std::function<bool()> started = {}) {
    watch([what = std::move(what)] { return what; }, sequence, std::move(done),
          std::move(started));
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Watched {
    std::function<std::string()> describe;
    int64_t sequence = 0;
    std::function<bool()> done;
    std::function<bool()> started;
    Clock::time_point deadline;
    std::atomic<bool> completed{false};  // set by the poller, read by the timer
    std::atomic<int> seen_started{-1};   // by the poller: -1 unknown, 0 not started, 1 started
  };

  // Queries the watched operations and drops the completed ones.
  void poll_loop();
  // Ends the job when an operation not known to be complete is overdue.
  void timer_loop();
  // Waits one poll interval; false once stopping.
  bool sleep_interval();
  // with_stacks: every thread's stack into the log file too (common/thread_stacks.h). Once a
  // process: the communicators' watchdogs of a stuck step fire together, and one line a rank
  // says it; the others' threads wait for the end.
  [[noreturn]] void end_job(const std::string& message, bool with_stacks = false);

  double timeout_s_;
  WatchdogHooks hooks_;
  std::mutex mutex_;
  std::condition_variable wake_;
  // In the order issued: the first overdue one is the oldest.
  std::list<std::shared_ptr<Watched>> watched_;
  bool stopping_ = false;
  std::thread poller_;  // last: started once everything they read exists
  std::thread timer_;
};

}  // namespace dtrain::dist
