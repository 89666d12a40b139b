// The communicator: one process group and the collectives the strategies need, on the
// backend's tensors (CPU tensors for MPI, CUDA tensors for NCCL). Operations return a Work that
// is in flight until wait(); every operation is bounded by the communicator's timeout, after
// which the whole job is ended with a message naming the operation, its sequence number and
// the ranks that never joined (never a silent hang).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

namespace dtrain::dist {

enum class ReduceOp { kSum, kAverage };

// A moment on the backend's clock: the host clock for MPI, a CUDA event for NCCL.
class TimePoint {
 public:
  virtual ~TimePoint() = default;
  // Milliseconds from this moment to `later` (same backend); blocks until both have happened.
  virtual double ms_until(const TimePoint& later) const = 0;
};

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

  // In place on `tensor` (contiguous); kAverage divides the sum by size() in the reduction.
  virtual std::unique_ptr<Work> all_reduce(torch::Tensor tensor, ReduceOp op) = 0;
  // `tensor` of `root` is copied into `tensor` of every rank.
  virtual std::unique_ptr<Work> broadcast(torch::Tensor tensor, int root) = 0;
  // output [size() * input.numel()] holds every rank's input, in rank order.
  virtual std::unique_ptr<Work> all_gather(torch::Tensor input, torch::Tensor output) = 0;
  // input [size() * output.numel()]: rank r receives the reduction of every rank's r-th block.
  virtual std::unique_ptr<Work> reduce_scatter(torch::Tensor input, torch::Tensor output,
                                               ReduceOp op) = 0;
  // Point to point, for the parameter server; matched by (peer, tag).
  virtual std::unique_ptr<Work> send(torch::Tensor tensor, int peer, int tag) = 0;
  virtual std::unique_ptr<Work> recv(torch::Tensor tensor, int peer, int tag) = 0;
  // Blocking, bounded by the timeout like every wait.
  virtual void barrier() = 0;
  // Ranks with the same `color` form a new communicator, ordered by `key`.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

// The world's communicator for tensors on `device`: Open MPI for CPU, NCCL for CUDA (an error
// in a build without NCCL). Every operation bounded by `timeout_s` seconds.
std::unique_ptr<Communicator> make_world_communicator(torch::Device device, double timeout_s);

}  // namespace dtrain::dist
