// The communicator: one process group and the collectives the strategies need, on the
// backend's tensors (CPU tensors for MPI). Operations return a Work that is in flight until
// wait(); every wait is bounded by the communicator's timeout, after which the whole job is
// ended with a message naming the operation and its sequence number (never a silent hang).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

namespace dtrain::dist {

enum class ReduceOp { kSum, kAverage };

// A collective in flight. wait() blocks until it completed on this rank (its buffers may then
// be read and reused); test() asks without blocking.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;

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

}  // namespace dtrain::dist
