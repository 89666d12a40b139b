// The MPI backend's view of time and completion: host time points, the bounded poll every wait
// uses, and the Work of one request. Private to dist/comm/mpi_*.cpp (it includes mpi.h).
#pragma once

#include "dist/comm/communicator.h"
#include "dist/comm/progress_channel.h"

#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace dtrain::dist {

std::shared_ptr<const TimePoint> host_now();

// Calls `done()` until it returns true. Past `timeout_s` seconds, `overdue()` says what did not
// happen and why ("all_reduce #2 (16 x Float) did not complete ...: missing rank(s) 1"); that is
// logged and the job ends (MPI_Abort, exit code 3): a rank that died or never joined must not
// leave the others waiting forever. Meanwhile answers the peers' progress queries on `progress`.
void poll_until(const std::function<bool()>& done, double timeout_s, ProgressChannel& progress,
                const std::function<std::string()>& overdue);

// What an MpiWork needs beside its request.
struct MpiOp {
  std::string what;        // "all_reduce #7 (1024 x Float)": the name in a timeout
  int64_t sequence = 0;    // its number in the communicator's progress channel
  bool receive = false;    // whether source() is defined
  std::function<void()> on_done;     // once complete, on the waiting thread (averaging)
  std::shared_ptr<const void> held;  // what MPI reads until completion (all_gather_v's counts)
};

// One request in flight; wait() polls it, bounded by the timeout.
class MpiWork : public Work {
 public:
  MpiWork(MPI_Request request, MpiOp op, double timeout_s,
          std::shared_ptr<ProgressChannel> progress);
  ~MpiWork() override;

  bool test() override;
  void wait() override;
  std::shared_ptr<const TimePoint> started() const override { return started_; }
  std::shared_ptr<const TimePoint> finished() const override { return finished_; }
  int source() const override;

 private:
  MPI_Request request_;
  MpiOp op_;
  double timeout_s_;
  std::shared_ptr<ProgressChannel> progress_;
  std::shared_ptr<const TimePoint> started_;
  std::shared_ptr<const TimePoint> finished_;
  int source_ = -1;
};

}  // namespace dtrain::dist
