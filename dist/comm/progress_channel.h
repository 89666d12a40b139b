// The side channel that names the missing ranks when an operation times out, for both
// backends. Each communicator numbers its operations here; when one is overdue, the rank asks
// every peer "how far are you?" over a duplicate of an MPI communicator with the same members,
// and names those that have not issued the operation: "2 (no answer)", "1 (at #4)".
//
// Who answers: on MPI, a rank waiting on an operation or a probe (poll_until); on NCCL, the
// communicator's watchdog thread, every poll, which needs MPI_THREAD_MULTIPLE (otherwise no
// thread answers and timeouts say the ranks are unknown). A rank that is dead, or blocked in
// something else for the whole grace period, gives no answer. Calls are thread-safe. Each
// communicator, a dup() too, has a channel of its own: a thread waiting on one answers for it.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dtrain::dist {

class ProgressChannel {
 public:
  // Collective over the members of `comm`, which it duplicates.
  explicit ProgressChannel(MPI_Comm comm);
  ~ProgressChannel();
  ProgressChannel(const ProgressChannel&) = delete;
  ProgressChannel& operator=(const ProgressChannel&) = delete;

  // The channel of a sub-communicator split from this one's members as MPI_Comm_split would
  // (collective over them; ranks by `key`, then by rank here).
  std::unique_ptr<ProgressChannel> split(int color, int key) const;

  // Numbers the next operation: 1, 2, ...
  int64_t next() { return ++issued_; }

  // Answers every pending query with the number of operations issued so far.
  void answer_queries();

  // The rank in MPI_COMM_WORLD (the job's, as mpirun numbers it) of this channel's `rank`:
  // what messages name, whatever sub-communicator they are about (a rank out of range is
  // left as it is, for the caller's check to name).
  int world_rank(int rank) const {
    return rank >= 0 && rank < size_ ? world_ranks_[static_cast<size_t>(rank)] : rank;
  }

  // The ranks that have not issued operation `sequence` after waiting up to `grace_s` for
  // their answers, or "none found"; named as in the world.
  std::string missing_ranks(int64_t sequence, double grace_s);

 private:
  void answer_queries_locked();

  MPI_Comm side_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;  // by rank here
  std::atomic<int64_t> issued_{0};
  std::mutex mutex_;            // one thread at a time probes and receives on side_
  std::deque<int64_t> answers_;  // send buffers must outlive their freed requests
};

// Whether MPI runs with MPI_THREAD_MULTIPLE, so that a watchdog thread may use a channel.
bool mpi_threads_multiple();

}  // namespace dtrain::dist
