#include "dist/comm/mpi_work.h"

#include "common/error.h"
#include "common/log.h"
#include "common/thread_stacks.h"
#include "dist/comm/mpi_communicator.h"
#include "dist/comm/mpi_types.h"

#include <exception>
#include <thread>

namespace dtrain::dist {

namespace {

using Clock = std::chrono::steady_clock;

class HostTimePoint : public TimePoint {
 public:
  explicit HostTimePoint(Clock::time_point when) : when_(when) {}
  double ms_until(const TimePoint& later) const override {
    const auto& other = dynamic_cast<const HostTimePoint&>(later);
    return std::chrono::duration<double, std::milli>(other.when_ - when_).count();
  }

 private:
  Clock::time_point when_;
};

}  // namespace

std::shared_ptr<const TimePoint> host_now() { return std::make_shared<HostTimePoint>(Clock::now()); }

void poll_until(const std::function<bool()>& done, double timeout_s, ProgressChannel& progress,
                const std::function<std::string()>& overdue) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (int polls = 0; !done(); ++polls) {
    if (Clock::now() > deadline) {
      log::error("rank {}: {}; ending the job", error_rank(), overdue());
      log::to_file(thread_stacks());  // where this rank's threads sit
      abort_world(3);
    }
    // Spin briefly for short operations, then sleep so a stuck wait leaves the core free.
    if (polls > 1000) {
      progress.answer_queries();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

MpiWork::MpiWork(MPI_Request request, MpiOp op, double timeout_s,
                 std::shared_ptr<ProgressChannel> progress)
    : request_(request),
      op_(std::move(op)),
      timeout_s_(timeout_s),
      progress_(std::move(progress)),
      started_(host_now()) {}

MpiWork::~MpiWork() {
  if (request_ == MPI_REQUEST_NULL) return;
  // Unwinding an error: a receive posted ahead waits for a message that may never come, and
  // its timeout would end the job under its own name before the error's is said. Cancelled,
  // it completes at once unless its message is already arriving.
  if (op_.receive && std::uncaught_exceptions() > 0) MPI_Cancel(&request_);
  wait();
}

bool MpiWork::test() {
  if (request_ == MPI_REQUEST_NULL) return true;
  int done = 0;
  MPI_Status status;
  DTRAIN_MPI_CHECK(MPI_Test(&request_, &done, &status));
  if (!done) return false;
  int cancelled = 0;
  DTRAIN_MPI_CHECK(MPI_Test_cancelled(&status, &cancelled));
  if (cancelled) {
    op_.held.reset();
    return true;
  }
  finished_ = host_now();
  if (op_.receive) source_ = status.MPI_SOURCE;
  if (op_.on_done) op_.on_done();
  op_.held.reset();
  return true;
}

void MpiWork::wait() {
  poll_until([this] { return test(); }, timeout_s_, *progress_, [this] {
    return fmt::format("{} did not complete within dist.timeout_s = {} s: missing rank(s) {}",
                       op_.what, timeout_s_,
                       progress_->missing_ranks(op_.sequence, std::min(2.0, timeout_s_)));
  });
}

int MpiWork::source() const {
  DTRAIN_CHECK(op_.receive && finished_, "source() of {}: only a completed receive has one",
               op_.what);
  return source_;
}

}  // namespace dtrain::dist
