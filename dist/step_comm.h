// The communication of one step, recorded as the strategy issues it and turned into named
// stats only when the loop reports (reading a CUDA event's time waits for it). Every
// strategy reports the same keys, each collective measured by its own formula; they are
// this rank's (the metrics are rank 0's):
//   comm/bytes        payload, as nccl-tests sizes it (all-reduce, broadcast, reduce: the
//                     tensor; reduce-scatter: its input; all-gather: its output), in bytes
//   comm/sent_bytes,  bytes that left and reached this rank, in every role it has (a
//   comm/recv_bytes   colocated server's traffic with the other workers too, add_served).
//                     A collective counts what the ring algorithms NCCL and Open MPI use for
//                     large messages move per rank, averaged over the ranks (how the payload
//                     is cut into pieces is the library's, so a rank's exact share is not
//                     known): all-reduce 2(n-1)/n x payload each way, reduce-scatter and
//                     all-gather (n-1)/n, hence fractions; a broadcast's chain every rank but
//                     the root receiving and every rank but the last sending; point to point
//                     the message
//   comm/collectives  operations issued
//   comm/ms           wall time in which any of the step's communication was in flight or
//                     the step waited for it: the union of the operations' intervals and the
//                     waits (add_wait), so operations that run together count once; a
//                     pipelined operation (one that runs behind the steps after the one that
//                     issued it, the parameter server's over collectives) only from the
//                     step's start on
//   comm/exposed_ms   wall time the step's compute waited for communication, the union of:
//                     gradient traffic in flight after backward's end (not the gaps before
//                     an operation starts, which are the host's), every blocking operation
//                     whole, what was left of a prefetched gather when the rank began to wait
//                     for it, and the waits the strategy recorded (a parameter server's for
//                     its parameters; never its pipelined operations' own time: they ran
//                     while the step computed). At most comm/ms
//   comm/busbw_gbps   bus bandwidth in GB/s (1e9 bytes a second), as nccl-tests defines it:
//                     the sum of the gradient and parameter traffic's payload x the
//                     collective's factor (2(n-1)/n all-reduce, (n-1)/n reduce-scatter and
//                     all-gather, 1 broadcast, reduce and point-to-point) over the wall time
//                     that traffic was in flight (the union of its intervals)
#pragma once

#include "dist/comm/communicator.h"
#include "dist/strategy.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::dist {

// What a rank's server moved during its worker's step: bytes to and from workers on other
// ranks (a colocated server's own worker exchanges with it in memory).
struct ServedBytes {
  int64_t sent = 0, received = 0;
};

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kSend, kRecv };

// Why an operation ran, which decides how its time counts.
enum class Traffic {
  kGradients,   // launched from backward's hooks or right after it: only the tail is exposed
  kParameters,  // blocking, and part of the bandwidth figure (ZeRO's all-gather, PS pulls)
  kSmall,       // blocking, latency-bound (BatchNorm buffers, control): not in the bandwidth
  kPrefetched,  // parameters gathered ahead of their use (ZeRO-3): exposed from the wait on
};

class StepComm {
 public:
  // `rank`, `ranks`: this rank in the communicator the operations run on; `origin`: the
  // step's start on its clock (Communicator::now()), which spans() count from.
  StepComm(int rank, int ranks, std::shared_ptr<const TimePoint> origin = nullptr)
      : rank_(rank), ranks_(ranks), origin_(std::move(origin)) {}

  // A completed (waited) operation. `root`: broadcast's and reduce's root, the peer of a
  // send or recv; ignored otherwise.
  void add(Collective kind, Traffic traffic, int64_t bytes, std::unique_ptr<Work> work,
           int root = 0);
  // A parameter gather issued ahead of its use, which this rank began to wait for at
  // `wait_start` (Communicator::now() before the wait): only the rest of it is exposed.
  void add_prefetched(Collective kind, int64_t bytes, std::unique_ptr<Work> work,
                      std::shared_ptr<const TimePoint> wait_start);
  // The same for an operation of a subgroup (a node's communicator), where this rank is
  // `rank` of `ranks`: the wire formulas take the subgroup's size.
  void add_in_group(int rank, int ranks, Collective kind, Traffic traffic, int64_t bytes,
                    std::unique_ptr<Work> work, int root = 0);
  // An operation whose time is not known (a collective replayed inside a CUDA graph). While
  // the step holds one, its stats leave out the time figures (comm/ms, comm/exposed_ms,
  // comm/busbw_gbps) rather than report part of the step's time, and spans() leaves it out.
  void add_unmeasured(Collective kind, Traffic traffic, int64_t bytes);
  // An operation whose bytes belong to this step but whose time none of its figures can hold:
  // a receive posted a step or more ahead that completed in the background, waiting on the
  // device for its sender as much as moving data. Counted in the bytes and the operations
  // only; the time figures stay, without it.
  void add_untimed(Collective kind, Traffic traffic, int64_t bytes, int root = 0);
  // An operation issued in an earlier step, or left to run behind this one's compute, that
  // this step completed: its time counts from the step's start (the origin; its own start
  // without one), overlapping pipelined operations once, and none of it is exposed: the
  // strategy records what the step waited for it with add_wait().
  void add_pipelined(Collective kind, Traffic traffic, int64_t bytes, std::unique_ptr<Work> work,
                     int root = 0);
  // The step (the host, or on GPUs the compute stream) waited for communication from `start`
  // to `end`: exposed whole.
  void add_wait(std::shared_ptr<const TimePoint> start, std::shared_ptr<const TimePoint> end);
  // The end of the step's (last micro-step's) backward on the communicator's clock.
  void set_backward_end(std::shared_ptr<const TimePoint> when) { backward_end_ = std::move(when); }
  // Bytes this rank's other role moved during the step: a colocated server's messages to
  // and from the other workers. In comm/sent_bytes and comm/recv_bytes only: they are not
  // the step's operations, and their time is the server's.
  void add_served(const ServedBytes& served) {
    served_sent_ += static_cast<double>(served.sent);
    served_received_ += static_cast<double>(served.received);
  }
  bool empty() const { return ops_.empty(); }

  Stats stats() const;
  // Each operation as "all_reduce 4.0 MiB (gradients)" from its start to its end, counted
  // from the origin (none without one).
  std::vector<Span> spans() const;

 private:
  struct Op {
    Collective kind;
    Traffic traffic;
    int64_t bytes;
    int root;
    std::unique_ptr<Work> work;  // none: unmeasured, or untimed
    int rank, ranks;  // in the communicator the operation ran on
    std::shared_ptr<const TimePoint> wait_start = nullptr;  // kPrefetched
    bool untimed = false;  // add_untimed: no time, and none missing
    bool pipelined = false;  // add_pipelined
  };
  // The point the intervals are counted from: the origin, or else the first time point held.
  const TimePoint* reference() const;

  int rank_, ranks_;
  std::vector<Op> ops_;
  double served_sent_ = 0.0, served_received_ = 0.0;  // add_served
  std::vector<std::pair<std::shared_ptr<const TimePoint>, std::shared_ptr<const TimePoint>>>
      waits_;  // add_wait
  std::shared_ptr<const TimePoint> origin_;
  std::shared_ptr<const TimePoint> backward_end_;
};

}  // namespace dtrain::dist
