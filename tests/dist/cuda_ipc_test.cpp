// CUDA IPC regions (dist/comm/cuda_ipc.h) between the ranks of one node, each on its GPU: what
// a rank copies into a peer's region lands there, and nowhere else. Built with CUDA only, and
// run by the NCCL suites alone (tests/CMakeLists.txt).
#include "test_device.h"

#include <catch2/catch.hpp>

#if DTRAIN_CUDA
#include "dist/comm/cuda_ipc.h"

#include <torch/cuda.h>

using dtrain::dist::Communicator;

TEST_CASE("a copy into a peer's shared region lands there", "[dist][cuda_ipc]") {
  static std::unique_ptr<Communicator> world =
      dtrain::dist::make_world_communicator(test_device(), 60.0);
  REQUIRE(world->device().is_cuda());
  const int n = world->size();
  const int me = world->rank();
  constexpr int64_t kBlock = int64_t{1} << 20;  // bytes each rank writes into each peer's region
  dtrain::dist::SharedDeviceRegions regions(*world, world->device(), n * kBlock);
  REQUIRE(regions.bytes() == n * kBlock);
  const auto byte_options = torch::TensorOptions().dtype(torch::kUInt8).device(world->device());
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    // Block `me` of each peer's region holds me + 1: device to device, by the copy engines.
    const torch::Tensor block = torch::full({kBlock}, me + 1, byte_options);
    regions.region(peer).narrow(0, me * kBlock, kBlock).copy_(block);
  }
  torch::cuda::synchronize();
  world->barrier();  // every rank's copies have completed

  const torch::Tensor mine = regions.region(me).cpu();
  for (int writer = 0; writer < n; ++writer) {
    CAPTURE(me, writer);
    const torch::Tensor block = mine.narrow(0, writer * kBlock, kBlock);
    const int expected = writer == me ? 0 : writer + 1;  // the own block: zeroed, never written
    CHECK(block.min().item<int>() == expected);
    CHECK(block.max().item<int>() == expected);
  }
  world->barrier();  // nobody frees a region a peer still reads
}
#endif
