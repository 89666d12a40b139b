// The communication of one step, recorded as the strategy issues it and turned into named
// stats only when the loop reports (reading a CUDA event's time waits for it). Every
// strategy reports the same keys, each collective measured by its own formula:
//   comm/bytes        payload, as nccl-tests sizes it (all-reduce, broadcast, reduce: the
//                     tensor; reduce-scatter: its input; all-gather: its output)
//   comm/sent_bytes,  what this rank put on and took off the wire under the ring algorithms
//   comm/recv_bytes   NCCL and Open MPI use for large messages: all-reduce 2(n-1)/n x payload
//                     each way, reduce-scatter and all-gather (n-1)/n, a broadcast's chain
//                     every rank but the root receiving and every rank but the last sending
//   comm/collectives  operations issued
//   comm/ms           time the operations ran, summed; a pipelined operation (one that runs
//                     behind the steps after the one that issued it, the parameter server's
//                     over collectives) only from the step's start on, and those together
//                     only while some of them were in flight, so they add at most the step
//   comm/exposed_ms   communication the step did not hide: the time after backward's end that
//                     gradient traffic was in flight (not the gaps before an operation starts,
//                     which are the host's), plus every blocking operation whole, plus what
//                     was left of a prefetched gather when the rank began to wait for it, plus
//                     the waits the strategy recorded for its pipelined operations (never
//                     their own time: they ran while the step computed)
//   comm/busbw_gbps   bus bandwidth of the gradient and parameter traffic: sum of payload x
//                     the collective's factor (2(n-1)/n all-reduce, (n-1)/n reduce-scatter
//                     and all-gather, 1 broadcast, reduce and point-to-point) over comm/ms
#pragma once

#include "dist/comm/communicator.h"
#include "dist/strategy.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::dist {

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
  int rank_, ranks_;
  std::vector<Op> ops_;
  std::vector<std::pair<std::shared_ptr<const TimePoint>, std::shared_ptr<const TimePoint>>>
      waits_;  // add_wait
  std::shared_ptr<const TimePoint> origin_;
  std::shared_ptr<const TimePoint> backward_end_;
};

}  // namespace dtrain::dist
