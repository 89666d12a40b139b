// Shared regions (dist/comm/shared_regions.h) between the ranks of one node: what a rank
// copies into a peer's region lands there and nowhere else, on CPU ranks (POSIX shared memory)
// and on GPUs (CUDA IPC, copies by the copy engines).
#include "dist/comm/shared_regions.h"
#include "test_device.h"

#include <catch2/catch.hpp>
#include <torch/cuda.h>

using dtrain::dist::Communicator;

namespace {

Communicator& world() { return *device_world(); }

}  // namespace

TEST_CASE("a copy into a peer's shared region lands there", "[dist][shared_regions]") {
  Communicator& comm = world();
  const int n = comm.size();
  const int me = comm.rank();
  constexpr int64_t kBlock = int64_t{1} << 16;  // bytes each rank writes into each peer's region
  const auto regions = dtrain::dist::make_shared_regions(comm, n * kBlock);
  REQUIRE(regions->bytes() == n * kBlock);
  REQUIRE(regions->region(me).device() == comm.device());
  const auto byte_options = torch::TensorOptions().dtype(torch::kUInt8).device(comm.device());
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    // Block `me` of every peer's region holds me + 1.
    const torch::Tensor block = torch::full({kBlock}, me + 1, byte_options);
    regions->region(peer).narrow(0, me * kBlock, kBlock).copy_(block);
  }
  if (comm.device().is_cuda()) torch::cuda::synchronize();
  comm.barrier();  // every rank's copies have completed

  const torch::Tensor mine = regions->region(me).cpu();
  for (int writer = 0; writer < n; ++writer) {
    CAPTURE(me, writer);
    const torch::Tensor block = mine.narrow(0, writer * kBlock, kBlock);
    const int expected = writer == me ? 0 : writer + 1;  // the own block: zeroed, never written
    CHECK(block.min().item<int>() == expected);
    CHECK(block.max().item<int>() == expected);
  }
  comm.barrier();  // nobody unmaps a region a peer still reads
}

TEST_CASE("shared regions refuse an empty size", "[dist][shared_regions]") {
  CHECK_THROWS_WITH(dtrain::dist::make_shared_regions(world(), 0),
                    Catch::Contains("positive size"));
}
