// Shared links (dist/comm/shared_link.h): every message arrives whole and in order, through
// rings small enough that messages wrap round them and senders wait for room, whether the
// receives are posted before the sends or long after; the links refuse what they do not carry.
#include "dist/comm/shared_link.h"
#include "test_device.h"

#include <catch2/catch.hpp>
#include <torch/cuda.h>

#include <chrono>
#include <thread>

using dtrain::dist::Communicator;
using dtrain::dist::SharedLinkSpec;
using dtrain::dist::Work;

namespace {

Communicator& world() { return *device_world(); }

// A link from every rank to every other, at [from * n + to].
std::vector<SharedLinkSpec> all_pairs(int n, int64_t capacity) {
  std::vector<SharedLinkSpec> specs;
  for (int from = 0; from < n; ++from) {
    for (int to = 0; to < n; ++to) {
      if (from != to) specs.push_back({from, to, capacity});
    }
  }
  return specs;
}

size_t link_index(int from, int to, int n) {
  return static_cast<size_t>(from * (n - 1) + (to < from ? to : to - 1));
}

// Message `i` from `from` to `to`: a length that varies (zero included), values that name it.
torch::Tensor message(int from, int to, int i, torch::Device device) {
  const int64_t length = (i * 37 + from * 11 + to) % 300;
  return torch::arange(length, torch::TensorOptions().dtype(torch::kFloat32)).add(1000.0 * i)
      .add(100000.0 * (from * 16 + to)).to(device);
}

}  // namespace

TEST_CASE("shared links deliver every message whole and in order", "[dist][shared_link]") {
  Communicator& comm = world();
  const int n = comm.size();
  const int me = comm.rank();
  constexpr int kMessages = 60;
  // 4 KiB: the largest message (299 floats) fits three times, so messages wrap and wait.
  const auto links = dtrain::dist::make_shared_links(comm, all_pairs(n, 4096), 60.0);
  const bool receive_late = GENERATE(false, true);
  INFO((receive_late ? "receives posted after the sends" : "receives posted first"));

  std::vector<std::unique_ptr<Work>> receives, sends;
  std::vector<torch::Tensor> received;
  const auto post_receives = [&] {
    for (int i = 0; i < kMessages; ++i) {
      for (int from = 0; from < n; ++from) {
        if (from == me) continue;
        const std::shared_ptr<Communicator>& link = links[link_index(from, me, n)];
        received.push_back(torch::full_like(message(from, me, i, comm.device()), -1.0f));
        receives.push_back(link->recv(received.back(), 1 - link->rank(), 0));
      }
    }
  };
  if (!receive_late) post_receives();
  for (int i = 0; i < kMessages; ++i) {
    for (int to = 0; to < n; ++to) {
      if (to == me) continue;
      const std::shared_ptr<Communicator>& link = links[link_index(me, to, n)];
      sends.push_back(link->send(message(me, to, i, comm.device()), 1 - link->rank(), 0));
    }
  }
  if (receive_late) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    post_receives();
  }
  for (const auto& work : receives) work->wait();
  for (const auto& work : sends) work->wait();
  if (comm.device().is_cuda()) torch::cuda::synchronize();  // wait() queued the copies only
  for (const auto& work : receives) CHECK(work->test());

  size_t k = 0;
  for (int i = 0; i < kMessages; ++i) {
    for (int from = 0; from < n; ++from) {
      if (from == me) continue;
      CAPTURE(i, from);
      CHECK(torch::equal(received[k++].cpu(), message(from, me, i, torch::kCPU)));
    }
  }
  comm.barrier();  // no peer still copies into a ring about to go
}

TEST_CASE("shared links refuse what they do not carry", "[dist][shared_link]") {
  Communicator& comm = world();
  const int n = comm.size();
  const int me = comm.rank();
  const auto links = dtrain::dist::make_shared_links(comm, all_pairs(n, 1024), 60.0);
  const int to = (me + 1) % n;
  const std::shared_ptr<Communicator>& out = links[link_index(me, to, n)];
  const std::shared_ptr<Communicator>& in = links[link_index(to, me, n)];
  const int peer = 1 - out->rank();
  const auto options = torch::TensorOptions().device(comm.device());
  CHECK(out->size() == 2);
  CHECK(out->rank() == (me < to ? 0 : 1));
  CHECK_THROWS_WITH(out->send(torch::zeros({257}, options), peer, 0),
                    Catch::Contains("does not fit the shared link's ring of 1024 bytes"));
  CHECK_THROWS_WITH(out->recv(torch::zeros({1}, options), peer, 0),
                    Catch::Contains("carries send() only"));
  CHECK_THROWS_WITH(in->send(torch::zeros({1}, options), 1 - in->rank(), 0),
                    Catch::Contains("carries recv() only"));
  CHECK_THROWS_WITH(out->send(torch::zeros({1}, options), peer, 3),
                    Catch::Contains("its tag 0"));
  CHECK_THROWS_WITH(out->send(torch::zeros({4, 4}, options).t(), peer, 0),
                    Catch::Contains("non-contiguous"));
  CHECK_THROWS_WITH(out->all_reduce(torch::zeros({1}, options), dtrain::dist::ReduceOp::kSum),
                    Catch::Contains("send() and recv() only"));
  comm.barrier();
}
