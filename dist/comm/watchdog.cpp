#include "dist/comm/watchdog.h"

#include "common/error.h"
#include "common/log.h"
#include "common/thread_stacks.h"

#include <fmt/format.h>

#include <cstdlib>
#include <exception>

namespace dtrain::dist {

namespace {

// How often outstanding operations are polled: a timeout fires at most this late, and the
// polls (a CUDA event query each) stay far from the training loop's own driver calls.
constexpr std::chrono::milliseconds kPollInterval(100);
// How long aborting the communicator and MPI may take before the process exits regardless.
constexpr std::chrono::seconds kExitGrace(15);

}  // namespace

Watchdog::Watchdog(double timeout_s, WatchdogHooks hooks)
    : timeout_s_(timeout_s),
      hooks_(std::move(hooks)),
      poller_([this] { poll_loop(); }),
      timer_([this] { timer_loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  timer_.join();
  poller_.join();
}

void Watchdog::watch(std::function<std::string()> describe, int64_t sequence,
                     std::function<bool()> done, std::function<bool()> started) {
  auto watched = std::make_shared<Watched>();
  watched->describe = std::move(describe);
  watched->sequence = sequence;
  watched->done = std::move(done);
  watched->started = std::move(started);
  watched->deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(timeout_s_));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    watched_.push_back(std::move(watched));
  }
  // No wake-up: the threads look at every poll interval, and waking them per operation would
  // cost the training loop a few system calls each time for nothing.
}

bool Watchdog::sleep_interval() {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait_for(lock, kPollInterval, [this] { return stopping_; });
  return !stopping_;
}

void Watchdog::poll_loop() {
  try {
    if (hooks_.on_thread_start) hooks_.on_thread_start();
  } catch (const std::exception& e) {
    end_job(fmt::format("rank {}: the communicator's watchdog could not start: {}",
                        error_rank(), e.what()));
  }
  while (sleep_interval()) {
    if (hooks_.on_poll) hooks_.on_poll();
    // Oldest first, up to the first one still running: the operations complete in the order
    // watched, and each query is a driver call that competes with the training loop's.
    for (;;) {
      std::shared_ptr<Watched> oldest;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (watched_.empty()) break;
        oldest = watched_.front();
      }
      // Without the lock: a query may block (see the header), and watch() must not.
      try {
        if (!oldest->done()) {
          if (oldest->started) oldest->seen_started.store(oldest->started() ? 1 : 0);
          break;
        }
      } catch (const std::exception& e) {  // a CUDA error raised by a kernel of the operation
        end_job(fmt::format("rank {}: {} failed: {}; ending the job", error_rank(),
                            oldest->describe(), e.what()));
      }
      oldest->completed.store(true);
      std::lock_guard<std::mutex> lock(mutex_);
      watched_.pop_front();  // only this thread removes entries: still the front
    }
  }
}

void Watchdog::timer_loop() {
  while (sleep_interval()) {
    std::shared_ptr<Watched> overdue;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto now = Clock::now();
      for (const auto& watched : watched_) {
        if (!watched->completed.load() && now > watched->deadline) {
          overdue = watched;
          break;
        }
      }
    }
    if (!overdue) continue;
    // A couple of seconds for the peers' answers: their own watchdogs fire about now.
    const std::string missing =
        overdue->sequence > 0 && hooks_.missing_ranks
            ? "missing rank(s) " + hooks_.missing_ranks(overdue->sequence)
            : "a rank died or never joined";
    const int started = overdue->seen_started.load();
    const char* state = started == 1   ? " (its kernel had started: waiting for a peer)"
                        : started == 0 ? " (its kernel had not started: queued behind work issued "
                                         "before it)"
                                       : "";
    end_job(fmt::format("rank {}: {}{} did not complete within dist.timeout_s = {} s: {}; "
                        "ending the job",
                        error_rank(), overdue->describe(), state, timeout_s_, missing),
            /*with_stacks=*/true);
  }
}

void Watchdog::end_job(const std::string& message, bool with_stacks) {
  static std::atomic<bool> ending{false};
  if (ending.exchange(true)) {  // another watchdog is ending the job, and the process with it
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  log::error("{}", message);
  if (with_stacks) log::to_file(thread_stacks());  // where this rank's threads sit
  // Should aborting hang (NCCL or MPI waiting on the stuck device), the rank still exits, and
  // mpirun ends the others.
  std::thread([] {
    std::this_thread::sleep_for(kExitGrace);
    std::_Exit(3);
  }).detach();
  hooks_.end_job();
  std::abort();  // end_job_ must not return; if it does, this rank at least does not hang
}

}  // namespace dtrain::dist
