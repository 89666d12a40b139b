// A watchdog thread for operations the host does not wait on (NCCL kernels in flight): it
// polls each watched operation and, past the deadline, logs which one never completed and
// ends the job, so that no rank waits alone.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

namespace dtrain::dist {

class Watchdog {
 public:
  // `on_thread_start` runs first on the watchdog's thread (to select the CUDA device its
  // polls query). `end_job` runs on that thread after a timeout was logged and must not
  // return: it aborts the communicator and the job.
  Watchdog(double timeout_s, std::function<void()> on_thread_start,
           std::function<void()> end_job);
  // Stops the thread; operations still watched are no longer bounded.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Bounds the operation named `what` (e.g. "all_reduce #7 (1024 x Float)") from now on, until
  // `done()` returns true. `done` runs on the watchdog's thread and must not block.
  void watch(std::string what, std::function<bool()> done);

 private:
  using Clock = std::chrono::steady_clock;
  struct Watched {
    std::string what;
    std::function<bool()> done;
    Clock::time_point deadline;
  };

  void run(const std::function<void()>& on_thread_start);
  // Drops completed operations; ends the job if one is overdue. Called with `mutex_` held.
  void poll();
  [[noreturn]] void end_job(const std::string& message);

  double timeout_s_;
  std::function<void()> end_job_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::list<Watched> watched_;  // in the order issued: the first overdue one is the oldest
  bool stopping_ = false;
  std::thread thread_;  // last: started once everything it reads exists
};

}  // namespace dtrain::dist
