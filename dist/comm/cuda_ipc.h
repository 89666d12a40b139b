// The device backend of dist/comm/shared_regions.h: each rank allocates its region with
// cudaMalloc, since an IPC handle names a whole allocation, not a block of the caching
// allocator, and opens every peer's handle. Built only with CUDA.
#pragma once

#include "dist/comm/shared_regions.h"

#include <c10/core/Stream.h>

#include <vector>

namespace dtrain::dist {

// A CUDA stream of this object's own, of the highest priority, created and destroyed with it:
// never one of the pool's, which PyTorch hands out in turn and NCCL's communicators take too,
// so that no copy of a shared link ever queues behind a collective waiting for its peers.
class OwnStream {
 public:
  explicit OwnStream(torch::Device device);
  ~OwnStream();
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;
  c10::Stream stream() const { return stream_; }

 private:
  void* raw_;  // cudaStream_t
  c10::Stream stream_;
};

class DeviceSharedRegions : public SharedRegions {
 public:
  // Collective over `comm`, on its CUDA device.
  DeviceSharedRegions(Communicator& comm, int64_t bytes);
  // Unmaps the peers' regions and frees this rank's.
  ~DeviceSharedRegions() override;
  DeviceSharedRegions(const DeviceSharedRegions&) = delete;
  DeviceSharedRegions& operator=(const DeviceSharedRegions&) = delete;

  int64_t bytes() const override { return bytes_; }
  // A copy_ into a peer's region is a device-to-device copy, by the copy engines.
  torch::Tensor region(int rank) const override;
  // cudaMemcpyAsync on the current stream: a peer's pointer is a device pointer of this
  // process (unified addressing), copied to or from over NVLink or PCIe.
  void copy(void* dst, const void* src, int64_t bytes) const override;

 private:
  // Unmaps the peers' regions and frees this rank's (the destructor's work).
  void release();

  torch::Device device_;
  int64_t bytes_;
  int rank_;
  std::vector<void*> mapped_;  // by rank; this rank's entry is its own allocation
};

}  // namespace dtrain::dist
