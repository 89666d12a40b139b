// Run only by tests/dist/expect_timeout.sh (MPI; shared links with "[stuck_link]") and
// expect_nccl_timeout.sh (NCCL, with DTRAIN_TEST_DEVICE=cuda): the last rank never
// joins an operation, and the others must end the job within the timeout
// (DTRAIN_TEST_TIMEOUT_S, default 3 s), naming it (not a silent hang).
#include "dist/comm/communicator.h"
#include "dist/comm/shared_link.h"
#include "test_device.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

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

// Run only by tests/dist/expect_timeout.sh with its tag: the last rank never sends over its shared
// link to the others, whose receives must end the job within the timeout, saying what the
// sender had sent.
TEST_CASE("a rank that never sends over a shared link ends the job", "[.][stuck_link]") {
  const char* timeout = std::getenv("DTRAIN_TEST_TIMEOUT_S");
  const double timeout_s = timeout ? std::atof(timeout) : 3.0;
  auto comm = dtrain::dist::make_world_communicator(test_device(), timeout_s);
  const int n = comm->size();
  const int last = n - 1;
  std::vector<dtrain::dist::SharedLinkSpec> specs;
  for (int to = 0; to < last; ++to) specs.push_back({last, to, 4096});
  const auto links = dtrain::dist::make_shared_links(*comm, specs, timeout_s);
  if (comm->rank() == last) {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // never sends
  } else {
    const auto& link = links[static_cast<size_t>(comm->rank())];
    torch::Tensor tensor = torch::zeros({16}, torch::device(comm->device()));
    link->recv(tensor, 1 - link->rank(), 0)->wait();
    const torch::Tensor result = tensor.cpu();
  }
  FAIL("the receive from a rank that never sent completed");
}
