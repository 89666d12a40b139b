#include "dist/comm/cuda_ipc.h"

#include "common/error.h"
#include "common/log.h"

#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

#include <cstring>

namespace dtrain::dist {

namespace {

void check(cudaError_t status, const char* call) {
  DTRAIN_CHECK(status == cudaSuccess, "{}: {}", call, cudaGetErrorString(status));
}

}  // namespace

SharedDeviceRegions::SharedDeviceRegions(Communicator& comm, torch::Device device, int64_t bytes)
    : device_(device), bytes_(bytes), rank_(comm.rank()) {
  DTRAIN_CHECK(device.is_cuda() && device.has_index(),
               "shared device regions need a CUDA device with an index, got {}", device.str());
  DTRAIN_CHECK(bytes > 0, "shared device regions need a positive size, got {} bytes", bytes);
  const c10::cuda::CUDAGuard guard(device.index());
  void* own = nullptr;
  check(cudaMalloc(&own, static_cast<size_t>(bytes)), "cudaMalloc");
  check(cudaMemset(own, 0, static_cast<size_t>(bytes)), "cudaMemset");
  cudaIpcMemHandle_t handle;
  check(cudaIpcGetMemHandle(&handle, own), "cudaIpcGetMemHandle");

  // Every rank's handle, gathered in rank order through the communicator's own device.
  constexpr auto kHandleBytes = static_cast<int64_t>(sizeof(cudaIpcMemHandle_t));
  const torch::Tensor mine =
      torch::from_blob(&handle, {kHandleBytes}, torch::kUInt8).to(comm.device());
  torch::Tensor all = torch::empty({comm.size() * kHandleBytes}, mine.options());
  comm.all_gather(mine, all)->wait();
  const torch::Tensor handles = all.cpu();

  mapped_.assign(static_cast<size_t>(comm.size()), nullptr);
  mapped_[static_cast<size_t>(rank_)] = own;
  for (int r = 0; r < comm.size(); ++r) {
    if (r == rank_) continue;
    cudaIpcMemHandle_t peer;
    std::memcpy(&peer, handles.data_ptr<uint8_t>() + r * kHandleBytes, sizeof(peer));
    check(cudaIpcOpenMemHandle(&mapped_[static_cast<size_t>(r)], peer,
                               cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle");
  }
}

SharedDeviceRegions::~SharedDeviceRegions() {
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

torch::Tensor SharedDeviceRegions::region(int rank) const {
  DTRAIN_CHECK(rank >= 0 && rank < static_cast<int>(mapped_.size()),
               "shared device regions: rank {} of {}", rank, mapped_.size());
  return torch::from_blob(mapped_[static_cast<size_t>(rank)], {bytes_},
                          torch::TensorOptions().dtype(torch::kUInt8).device(device_));
}

}  // namespace dtrain::dist
