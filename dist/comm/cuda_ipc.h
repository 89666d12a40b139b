// Device memory that the processes of one node map from one another (CUDA IPC), for a
// transport whose transfers hold no kernel: a copy into a peer's memory, made by the copy
// engines, completes on its own whatever the peer's GPU is doing, so no work on any GPU waits
// for a peer. Beside such work every implicit synchronization CUDA makes (a pinned or device
// allocation, a command to the NULL stream) waits only for work that ends, where beside a
// receive posted for a peer it deadlocks (docs/ARCHITECTURE.md, "What still threatens it").
// Arrival is the writer's to tell: it knows when its copy has completed (an event on its own
// stream) and says so to the reader over the host.
//
// Each rank allocates its region with cudaMalloc, since an IPC handle names a whole
// allocation, not a block of the caching allocator, and the ranks exchange their handles.
// Built only with CUDA.
#pragma once

#include "dist/comm/communicator.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace dtrain::dist {

class SharedDeviceRegions {
 public:
  // Collective over `comm`, whose ranks share one node (on a GPU each, or several on one):
  // this rank's region of `bytes` on `device`, zeroed, and every peer's mapped here.
  SharedDeviceRegions(Communicator& comm, torch::Device device, int64_t bytes);
  // Unmaps the peers' regions and frees this rank's. The caller has made sure that no peer
  // writes here any more and that this rank's copies into peers have completed (a barrier
  // after synchronizing).
  ~SharedDeviceRegions();
  SharedDeviceRegions(const SharedDeviceRegions&) = delete;
  SharedDeviceRegions& operator=(const SharedDeviceRegions&) = delete;

  int64_t bytes() const { return bytes_; }
  // uint8 [bytes] over rank `rank`'s region as mapped in this process (this rank's own for
  // comm.rank()): a copy_ into a peer's is a device-to-device copy, by the copy engines.
  torch::Tensor region(int rank) const;

 private:
  torch::Device device_;
  int64_t bytes_;
  int rank_;
  std::vector<void*> mapped_;  // by rank; this rank's entry is its own allocation
};

}  // namespace dtrain::dist
