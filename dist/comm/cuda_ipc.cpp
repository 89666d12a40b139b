#include "dist/comm/cuda_ipc.h"

#include "common/error.h"
#include "common/log.h"
#include "dist/comm/gather.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstring>
#include <string>

namespace dtrain::dist {

namespace {

void check(cudaError_t status, const char* call) {
  DTRAIN_CHECK(status == cudaSuccess, "{}: {}", call, cudaGetErrorString(status));
}

}  // namespace

DeviceSharedRegions::DeviceSharedRegions(Communicator& comm, int64_t bytes)
    : device_(comm.device()), bytes_(bytes), rank_(comm.rank()) {
  DTRAIN_CHECK(device_.is_cuda() && device_.has_index(),
               "device shared regions need a CUDA device with an index, got {}", device_.str());
  DTRAIN_CHECK(bytes > 0, "shared regions need a positive size, got {} bytes", bytes);
  const c10::cuda::CUDAGuard guard(device_.index());
  void* own = nullptr;
  check(cudaMalloc(&own, static_cast<size_t>(bytes)), "cudaMalloc");
  mapped_.assign(static_cast<size_t>(comm.size()), nullptr);
  mapped_[static_cast<size_t>(rank_)] = own;
  check(cudaMemset(own, 0, static_cast<size_t>(bytes)), "cudaMemset");
  cudaIpcMemHandle_t handle;
  check(cudaIpcGetMemHandle(&handle, own), "cudaIpcGetMemHandle");
  const std::vector<std::string> handles = all_gather_bytes(
      comm, std::string(reinterpret_cast<const char*>(&handle), sizeof(handle)));
  for (int r = 0; r < comm.size(); ++r) {
    if (r == rank_) continue;
    const std::string& bytes_of_r = handles[static_cast<size_t>(r)];
    DTRAIN_CHECK(bytes_of_r.size() == sizeof(cudaIpcMemHandle_t),
                 "rank {} sent a CUDA IPC handle of {} bytes", r, bytes_of_r.size());
    cudaIpcMemHandle_t peer;
    std::memcpy(&peer, bytes_of_r.data(), sizeof(peer));
    const cudaError_t opened = cudaIpcOpenMemHandle(&mapped_[static_cast<size_t>(r)], peer,
                                                    cudaIpcMemLazyEnablePeerAccess);
    if (opened != cudaSuccess) {
      mapped_[static_cast<size_t>(r)] = nullptr;
      release();
      throw UserError(fmt::format(
          "rank {} cannot map rank {}'s GPU memory (cudaIpcOpenMemHandle: {}): shared links "
          "need GPUs that reach one another (NVLink or PCIe peer access) and see each other "
          "(CUDA_VISIBLE_DEVICES); set dist.ps.p2p_links = \"communicator\"",
          rank_, r, cudaGetErrorString(opened)));
    }
  }
}

DeviceSharedRegions::~DeviceSharedRegions() { release(); }

void DeviceSharedRegions::release() {
  const c10::cuda::CUDAGuard guard(device_.index());
  for (size_t r = 0; r < mapped_.size(); ++r) {
    if (mapped_[r] == nullptr) continue;
    const cudaError_t status = static_cast<int>(r) == rank_ ? cudaFree(mapped_[r])
                                                           : cudaIpcCloseMemHandle(mapped_[r]);
    if (status != cudaSuccess && status != cudaErrorCudartUnloading) {
      log::warn("rank {}: releasing the shared region of rank {}: {}", rank_, r,
                cudaGetErrorString(status));
    }
  }
}

torch::Tensor DeviceSharedRegions::region(int rank) const {
  DTRAIN_CHECK(rank >= 0 && rank < static_cast<int>(mapped_.size()),
               "shared regions: rank {} of {}", rank, mapped_.size());
  return torch::from_blob(mapped_[static_cast<size_t>(rank)], {bytes_},
                          torch::TensorOptions().dtype(torch::kUInt8).device(device_));
}

void DeviceSharedRegions::copy(void* dst, const void* src, int64_t bytes) const {
  check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault,
                        c10::cuda::getCurrentCUDAStream(device_.index()).stream()),
        "cudaMemcpyAsync");
}

OwnStream::OwnStream(torch::Device device) : raw_(nullptr), stream_(c10::Stream::DEFAULT, device) {
  const c10::cuda::CUDAGuard guard(device.index());
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  cudaStream_t raw = nullptr;
  check(cudaStreamCreateWithPriority(&raw, cudaStreamNonBlocking, greatest),
        "cudaStreamCreateWithPriority");
  raw_ = raw;
  stream_ = c10::cuda::getStreamFromExternal(raw, device.index());
}

OwnStream::~OwnStream() {
  const cudaError_t status = cudaStreamDestroy(static_cast<cudaStream_t>(raw_));
  if (status != cudaSuccess && status != cudaErrorCudartUnloading) {
    log::warn("destroying a shared link's stream: {}", cudaGetErrorString(status));
  }
}

}  // namespace dtrain::dist
