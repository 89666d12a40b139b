// Run only by tests/dist/expect_timeout.sh: the last rank never joins an all_reduce, and the
// others must end the job within the timeout, naming the operation (not a silent hang).
#include "dist/comm/mpi_communicator.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

TEST_CASE("a rank that never joins ends the job", "[.][stuck]") {
  auto comm = dtrain::dist::make_mpi_world(/*timeout_s=*/3.0);
  torch::Tensor tensor = torch::ones({16});
  comm->all_reduce(tensor, dtrain::dist::ReduceOp::kSum)->wait();  // #1: everyone
  if (comm->rank() == comm->size() - 1) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // never joins #2
  }
  comm->all_reduce(tensor, dtrain::dist::ReduceOp::kSum)->wait();
  FAIL("the stuck all_reduce completed");
}
