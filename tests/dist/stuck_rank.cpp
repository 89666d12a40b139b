// Run only by tests/dist/expect_timeout.sh (MPI) and expect_nccl_timeout.sh (NCCL, with
// DTRAIN_TEST_DEVICE=cuda): the last rank never joins an all_reduce, and the others must end
// the job within the timeout (DTRAIN_TEST_TIMEOUT_S, default 3 s), naming the operation (not a
// silent hang).
#include "dist/comm/communicator.h"
#include "test_device.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <thread>

TEST_CASE("a rank that never joins ends the job", "[.][stuck]") {
  const char* timeout = std::getenv("DTRAIN_TEST_TIMEOUT_S");
  const double timeout_s = timeout ? std::atof(timeout) : 3.0;
  auto comm = dtrain::dist::make_world_communicator(test_device(), timeout_s);
  torch::Tensor tensor = torch::ones({16}, torch::device(comm->device()));
  comm->all_reduce(tensor, dtrain::dist::ReduceOp::kSum)->wait();  // #1: everyone
  if (comm->rank() == comm->size() - 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // never joins #2
  }
  comm->all_reduce(tensor, dtrain::dist::ReduceOp::kSum)->wait();
  // On NCCL wait() does not block the host: reading the result does.
  const torch::Tensor result = tensor.cpu();
  FAIL("the stuck all_reduce completed");
}
