// Which workers still train, under dist.ps.tolerate_worker_loss (async, dedicated servers).
//
// Open MPI 4.1 has no fault-tolerant MPI (ULFM): a collective with a dead member never
// completes, and its survivors cannot agree on whether it did for them. So under
// dist.ps.tolerate_worker_loss the workers meet in no collective of their own: each sum over
// them (metrics, barriers, BatchNorm averaging) is a roll call on server 0, carrying the
// worker's part. Server 0 answers once every worker still counted has called, with the list
// of those and the sum of their parts, the same answer for all. A worker that has sent server
// 0 nothing for dist.timeout_s while others wait at a roll call is lost: dropped from the
// list and from the sum. Async servers need no worker to wait for another, so the rest train
// on.
//
// This class is server 0's bookkeeping, apart from the messages: it only counts and decides.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace dtrain::dist {

class LiveWorkers {
 public:
  using Clock = std::chrono::steady_clock;

  LiveWorkers(int workers, double timeout_s, Clock::time_point now);

  // A message of any kind from worker `w`: it is alive.
  void heard(size_t w, Clock::time_point now);
  // Worker `w` calls its next roll.
  void called(size_t w, Clock::time_point now);
  // The workers found lost now: silent for the timeout while another waits at the roll.
  std::vector<size_t> find_lost(Clock::time_point now);
  // Every worker still counted has called the roll not yet answered: answer it (returns
  // true once per roll). A worker waiting for the answer cannot speak, so every silence
  // starts again at `now`.
  bool answer(Clock::time_point now);

  bool lost(size_t w) const { return lost_[w]; }
  int live() const;
  // 1 per worker still training, 0 per lost one: the answer to a roll call.
  std::vector<int64_t> mask() const;

 private:
  double timeout_s_;
  std::vector<Clock::time_point> last_heard_;
  std::vector<int64_t> calls_;  // roll calls made by each worker
  std::vector<bool> lost_;
  int64_t answered_ = 0;  // roll calls answered
};

}  // namespace dtrain::dist
