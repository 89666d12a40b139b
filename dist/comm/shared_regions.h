// Memory that the ranks of one node map from one another, for a transport whose transfers
// are one-sided: a rank copies into a peer's region and then tells it over the host, and no
// operation of either rank waits for the other to take part. On GPUs the copies are made by
// the copy engines and hold no kernel, so that no GPU work ever waits for a peer, and every
// implicit synchronization CUDA makes (a pinned or device allocation, a command to the NULL
// stream) waits only for work that ends, where beside a receive posted for a peer it
// deadlocks (docs/ARCHITECTURE.md, "What still threatens it").
//   CPU ranks  POSIX shared memory (dist/comm/shared_regions.cpp)
//   GPUs       CUDA IPC (dist/comm/cuda_ipc.h), device memory mapped into each peer
// A rank that copies into a peer's region must know that the copy has completed before it
// tells the peer (on GPUs: an event on its own stream, queried on the host).
#pragma once

#include "dist/comm/communicator.h"

#include <torch/torch.h>

#include <cstdint>
#include <memory>

namespace dtrain::dist {

class SharedRegions {
 public:
  virtual ~SharedRegions() = default;
  virtual int64_t bytes() const = 0;
  // uint8 [bytes] over rank `rank`'s region as mapped in this process (this rank's own for
  // the communicator's rank), in the regions' memory (host or the communicator's device).
  virtual torch::Tensor region(int rank) const = 0;
  // Copies `bytes` from `src` to `dst`, either of which may lie in a peer's region and the
  // other in this rank's memory of the same kind: on GPUs queued on the current stream, for
  // the copy engines; on the host at once.
  virtual void copy(void* dst, const void* src, int64_t bytes) const = 0;
};

// Collective over `comm`, whose ranks share one node: this rank's region of `bytes`, zeroed,
// and every peer's mapped here, in host memory for CPU ranks and in device memory on GPUs. The
// regions live until every rank has destroyed its SharedRegions; the caller makes sure that no
// peer still writes into a region being destroyed (a barrier once the copies are complete).
std::unique_ptr<SharedRegions> make_shared_regions(Communicator& comm, int64_t bytes);
// The same in host memory whatever the communicator's device: for what the host of each rank
// reads and writes (a transport's control words beside data in device regions).
std::unique_ptr<SharedRegions> make_host_shared_regions(Communicator& comm, int64_t bytes);

}  // namespace dtrain::dist
