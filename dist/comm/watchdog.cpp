#include "dist/comm/watchdog.h"

#include "common/error.h"
#include "common/log.h"

#include <fmt/format.h>

#include <cstdlib>
#include <exception>

namespace dtrain::dist {

namespace {

// How often outstanding operations are polled: a timeout fires at most this late, and the
// polls (a CUDA event query each) stay far from the training loop's own driver calls.
constexpr std::chrono::milliseconds kPollInterval(100);

}  // namespace

Watchdog::Watchdog(double timeout_s, std::function<void()> on_thread_start,
                   std::function<void()> end_job)
    : timeout_s_(timeout_s),
      end_job_(std::move(end_job)),
      thread_([this, start = std::move(on_thread_start)] { run(start); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void Watchdog::watch(std::string what, std::function<bool()> done) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s_));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    watched_.push_back({std::move(what), std::move(done), deadline});
  }
  wake_.notify_one();
}

void Watchdog::run(const std::function<void()>& on_thread_start) {
  try {
    if (on_thread_start) on_thread_start();
  } catch (const std::exception& e) {
    end_job(fmt::format("rank {}: the communicator's watchdog could not start: {}",
                        error_rank(), e.what()));
  }
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (watched_.empty()) {
      wake_.wait(lock, [this] { return stopping_ || !watched_.empty(); });
    } else {
      wake_.wait_for(lock, kPollInterval, [this] { return stopping_; });
    }
    if (!stopping_) poll();
  }
}

void Watchdog::poll() {
  const auto now = Clock::now();
  for (auto it = watched_.begin(); it != watched_.end();) {
    bool done = false;
    try {
      done = it->done();
    } catch (const std::exception& e) {  // e.g. a CUDA error raised by a kernel of the operation
      end_job(fmt::format("rank {}: {} failed: {}; ending the job", error_rank(), it->what,
                          e.what()));
    }
    if (done) {
      it = watched_.erase(it);
    } else if (now > it->deadline) {
      end_job(fmt::format("rank {}: {} did not complete within dist.timeout_s = {} s: a rank "
                          "died or never joined; ending the job",
                          error_rank(), it->what, timeout_s_));
    } else {
      ++it;
    }
  }
}

void Watchdog::end_job(const std::string& message) {
  log::error("{}", message);
  end_job_();
  std::abort();  // end_job_ must not return; if it does, this rank at least does not hang
}

}  // namespace dtrain::dist
