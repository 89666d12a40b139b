// A watchdog for operations the host does not wait on (NCCL kernels in flight): it polls each
// watched operation and, past the deadline, logs which one never completed and ends the job,
// so that no rank waits alone. Two threads: a poller, whose queries (cudaEventQuery) can block
// while the main thread sits in a synchronous CUDA call behind the stuck kernel, and a timer
// that never calls CUDA and so always ends the job at the deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace dtrain::dist {

class Watchdog {
 public:
  // `on_thread_start` runs first on the poller's thread (to select the CUDA device its
  // queries use). `end_job` runs after a timeout was logged and must not return: it aborts
  // the communicator and the job (should it hang, the process exits on its own).
  Watchdog(double timeout_s, std::function<void()> on_thread_start,
           std::function<void()> end_job);
  // Stops the thread; operations still watched are no longer bounded.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Bounds the operation named `what` (e.g. "all_reduce #7 (1024 x Float)") from now on, until
  // `done()` returns true. `done` runs on the poller's thread.
  void watch(std::string what, std::function<bool()> done);

 private:
  using Clock = std::chrono::steady_clock;
  struct Watched {
    std::string what;
    std::function<bool()> done;
    Clock::time_point deadline;
    std::atomic<bool> completed{false};  // set by the poller, read by the timer
  };

  // Queries the watched operations and drops the completed ones.
  void poll_loop(const std::function<void()>& on_thread_start);
  // Ends the job when an operation not known to be complete is overdue.
  void timer_loop();
  // Waits one poll interval; false once stopping.
  bool sleep_interval();
  [[noreturn]] void end_job(const std::string& message);

  double timeout_s_;
  std::function<void()> end_job_;
  std::mutex mutex_;
  std::condition_variable wake_;
  // In the order issued: the first overdue one is the oldest.
  std::list<std::shared_ptr<Watched>> watched_;
  bool stopping_ = false;
  std::thread poller_;  // last: started once everything they read exists
  std::thread timer_;
};

}  // namespace dtrain::dist
