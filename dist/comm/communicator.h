// The communicator: one process group and the collectives the strategies need, on the
// backend's tensors (CPU tensors for MPI, CUDA tensors for NCCL). Operations return a Work that
// is in flight until wait(); every operation is bounded by the communicator's timeout, after
// which the whole job is ended with a message naming the operation, its sequence number and
// the ranks that never joined (never a silent hang).
//
// Threads: a communicator, and the Works it returns, are used by one thread at a time. A second
// thread (a parameter server) takes a communicator of its own from dup(), called collectively
// on the main thread before the thread starts; from then on each thread may run any operation
// on its own communicator while the other runs operations on theirs. On MPI this needs
// MPI_THREAD_MULTIPLE, which init_world() asks for: where the library granted less, any
// operation issued off the main thread throws a UserError. On NCCL, every rank must issue the
// operations of the two communicators in the same order (NCCL's rule for concurrent
// communicators on one GPU), or they can deadlock.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::dist {

enum class ReduceOp { kSum, kAverage };

// recv(), probe() and iprobe() from whichever rank sends first.
constexpr int kAnySource = -1;
// probe() and iprobe() for a message of any tag.
constexpr int kAnyTag = -1;

// The backend's hold on a probed message (MPI's matched message); opaque.
class ProbedMessage;

// A message that has arrived, found by probe() or iprobe(), and not yet received. It is held
// for recv_probed() alone: no other receive, on any thread, can take it, so every envelope must
// be received exactly once.
struct Envelope {
  int source = 0;     // the sending rank
  int tag = 0;
  int64_t bytes = 0;  // the message's size: the receiving tensor's nbytes()
  std::shared_ptr<ProbedMessage> message;
};

// A moment on the backend's clock: the host clock for MPI, a CUDA event for NCCL.
class TimePoint {
 public:
  virtual ~TimePoint() = default;
  // Milliseconds from this moment to `later` (same backend); blocks until both have happened.
  // NaN where either was taken with timing off (set_timing).
  virtual double ms_until(const TimePoint& later) const = 0;
};

// Whether the time points that operations issued from now on carry (Work::started(),
// finished(), Communicator::now()) measure anything; on by default, for every communicator
// of the process. On NCCL a timed operation records two timing events, and each costs about
// 3.5 µs of device time (bench_allreduce's "+timing" column: 24 µs against 17 µs for a
// 1 MiB all-reduce on 4 H200s): the trainer times only the steps whose figures it reports.
// MPI's host clock costs nothing and is always read.
void set_timing(bool on);
bool timing();
// from.ms_until(to), or 0 where either point was taken with timing off: an operation issued
// between the timed steps (a checkpoint's, say) and recorded with a timed one counts no time
// rather than making the step's figures NaN.
double measured_ms(const TimePoint& from, const TimePoint& to);

// A collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  // After wait(), work issued next may use the result: on the host for MPI; on the current
  // CUDA stream for NCCL, where the host does not block (a watchdog bounds the wait instead).
  virtual void wait() = 0;
  // Whether the operation has completed, without blocking.
  virtual bool test() = 0;
  // When the operation started and finished running; valid once wait() returned.
  virtual std::shared_ptr<const TimePoint> started() const = 0;
  virtual std::shared_ptr<const TimePoint> finished() const = 0;
  // A receive's sender: the peer named, or the rank matched by kAnySource; valid once wait()
  // returned or test() returned true. A check failure for any other operation.
  virtual int source() const = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  // Where this communicator's tensors live.
  virtual torch::Device device() const = 0;
  // Now, in the order of the compute work issued so far (the current CUDA stream for NCCL).
  virtual std::shared_ptr<const TimePoint> now() = 0;

  // Tensors: float32, float64, float16, bfloat16, int32, int64, uint8. Reductions average
  // float types and sum any; float16 and bfloat16 are added in float, rounded at each step.

  // In place on `tensor` (contiguous); kAverage divides the sum by size() in the reduction.
  virtual std::unique_ptr<Work> all_reduce(torch::Tensor tensor, ReduceOp op) = 0;
  // In place: `tensor` of `root` receives the reduction of every rank's `tensor`; the other
  // ranks' tensors are only read, and unchanged.
  virtual std::unique_ptr<Work> reduce(torch::Tensor tensor, int root, ReduceOp op) = 0;
  // `tensor` of `root` is copied into `tensor` of every rank.
  virtual std::unique_ptr<Work> broadcast(torch::Tensor tensor, int root) = 0;
  // output [size() * input.numel()] holds every rank's input, in rank order.
  virtual std::unique_ptr<Work> all_gather(torch::Tensor input, torch::Tensor output) = 0;
  // Variable sizes: rank r contributes counts[r] elements (its input.numel(); zero allowed);
  // output [sum of counts] holds them in rank order. `counts`, one per rank, the same on all.
  virtual std::unique_ptr<Work> all_gather_v(torch::Tensor input, torch::Tensor output,
                                             std::vector<int64_t> counts) = 0;
  // input [size() * output.numel()]: rank r receives the reduction of every rank's r-th block.
  virtual std::unique_ptr<Work> reduce_scatter(torch::Tensor input, torch::Tensor output,
                                               ReduceOp op) = 0;
  // Point to point, for the parameter server; matched by (peer, tag), tag >= 0. recv() takes
  // kAnySource on MPI only; the Work's source() then names the sender.
  virtual std::unique_ptr<Work> send(torch::Tensor tensor, int peer, int tag) = 0;
  virtual std::unique_ptr<Work> recv(torch::Tensor tensor, int peer, int tag) = 0;
  // Probes, for a server that learns who asks and how much only when a request arrives.
  // `source` may be kAnySource and `tag` kAnyTag. MPI only: on NCCL they throw a UserError (use
  // an MPI communicator for the parameter server's control traffic).
  // Non-blocking: a pending message matching (source, tag), or nothing.
  virtual std::optional<Envelope> iprobe(int source, int tag) = 0;
  // Blocking until such a message arrives, bounded by the timeout like every wait.
  virtual Envelope probe(int source, int tag) = 0;
  // Receives the message an envelope of this communicator holds into `tensor` (contiguous,
  // exactly envelope.bytes bytes).
  virtual std::unique_ptr<Work> recv_probed(const Envelope& envelope, torch::Tensor tensor) = 0;
  // Blocking, bounded by the timeout like every wait.
  virtual void barrier() = 0;
  // Ranks with the same `color` form a new communicator, ordered by `key`. Collective.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // The same members and ranks in a matching space of its own: its messages and collectives
  // never match this one's (for another thread, see the top). Collective.
  virtual std::unique_ptr<Communicator> dup() = 0;
  // dup(), whose NCCL kernels each take at most `max_ctas` thread blocks, so at most that many
  // SMs (0: NCCL's choice): for operations that wait long on the device beside the compute,
  // where every block they hold spins. MPI: dup().
  virtual std::unique_ptr<Communicator> dup_with_max_ctas(int max_ctas) = 0;
};

// The world's communicator for tensors on `device`: Open MPI for CPU, NCCL for CUDA (an error
// in a build without NCCL). Every operation bounded by `timeout_s` seconds.
std::unique_ptr<Communicator> make_world_communicator(torch::Device device, double timeout_s);
// The same over world ranks [0, num_ranks) only, ranked as in the world: the ranks that
// compute on `device` when the ranks after them hold no device (dist/placement.h). Collective
// over those ranks only.
std::unique_ptr<Communicator> make_device_communicator(torch::Device device, double timeout_s,
                                                       int num_ranks);

}  // namespace dtrain::dist
