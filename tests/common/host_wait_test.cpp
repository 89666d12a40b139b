// common/host_wait.h: a wait for the GPU that leaves the CUDA driver free for other threads.
#include "common/host_wait.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <thread>

TEST_CASE("to_host: a CPU tensor comes back as it is", "[common]") {
  const torch::Tensor values = torch::arange(4.0);
  dtrain::wait_for_stream(torch::kCPU);  // nothing to wait for
  CHECK(dtrain::to_host(values).data_ptr() == values.data_ptr());
}

TEST_CASE("to_host: another thread's copy goes on while it waits", "[common]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  const torch::Device cuda(torch::kCUDA, 0);
  // Work that keeps the current stream busy for a good part of a second.
  const torch::Tensor a = torch::randn({4096, 4096}, torch::device(cuda));
  torch::Tensor x;
  for (int i = 0; i < 200; ++i) x = torch::mm(a, a);
  const torch::Tensor total = x.sum();

  std::atomic<bool> waited{false};
  bool copied_while_waiting = false;
  std::thread other([&] {
    const c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
    guard.setDevice(cuda);
    guard.exchangeStream(guard.getStreamFromGlobalPool(cuda));
    const torch::Tensor src = torch::ones({1024}, torch::device(cuda));
    torch::Tensor dst = torch::empty_like(src);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the main thread waits now
    dst.copy_(src, /*non_blocking=*/true);  // a cudaMemcpyAsync on a stream of its own
    copied_while_waiting = !waited.load();
  });
  const torch::Tensor host = dtrain::to_host(total);
  waited = true;
  other.join();
  CHECK(host.device().is_cpu());
  CHECK(std::isfinite(host.item<float>()));
  CHECK(copied_while_waiting);  // a copy to pageable memory would have held it up
}
