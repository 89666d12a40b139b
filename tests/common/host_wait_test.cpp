// common/host_wait.h: a wait for the GPU that leaves the CUDA driver free for
// other threads.
#include "common/host_wait.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <thread>

TEST_CASE("to_host: a CPU tensor comes back as it is", "[common]") {
  const torch::Tensor values = torch::arange(4.0);
  dtrain::wait_for_stream(torch::kCPU); // nothing to wait for
  CHECK(dtrain::to_host(values).data_ptr() == values.data_ptr());
}

TEST_CASE("to_host: another thread's copy goes on while it waits", "[common]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  const torch::Device cuda(torch::kCUDA, 0);
  // Made before the wait: the other thread then makes one CUDA call, its copy,
  // and nothing that allocates (a new segment's cudaMalloc may wait for the
  // device on its own account).
  const torch::Tensor src = torch::ones({1024}, torch::device(cuda));
  torch::Tensor dst = torch::empty_like(src);
  const c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  const c10::Stream side = guard.getStreamFromGlobalPool(cuda);
  torch::cuda::synchronize();
  // Work that keeps the current stream busy for a good part of a second, in few
  // launches: a launch blocks the host once the device's queue is full. Run
  // once first: what the first run allocates (cudaMalloc waits for the device)
  // then comes from the cache, and the launches return at once (on an H200 the
  // first run's took all of its 0.7 s).
  const torch::Tensor a = torch::randn({16384, 16384}, torch::device(cuda));
  const auto work = [&a] {
    torch::Tensor x;
    for (int i = 0; i < 4; ++i)
      x = torch::mm(a, a);
    return x.sum();
  };
  work();
  torch::cuda::synchronize();
  using Clock = std::chrono::steady_clock;
  const auto launching = Clock::now();
  const torch::Tensor total = work();
  const auto start = Clock::now();
  const double launch_ms =
      std::chrono::duration<double, std::milli>(start - launching).count();
  std::atomic<bool> waited{false};
  bool copied_while_waiting = false;
  double copied_after_ms = 0.0;
  std::thread other([&] {
    const c10::impl::VirtualGuardImpl cuda_here(c10::DeviceType::CUDA);
    cuda_here.setDevice(cuda);
    cuda_here.exchangeStream(side);
    std::this_thread::sleep_for(
        std::chrono::milliseconds(20)); // the main thread waits now
    dst.copy_(
        src, /*non_blocking=*/true); // a cudaMemcpyAsync on a stream of its own
    copied_while_waiting = !waited.load();
    copied_after_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  });
  const torch::Tensor host = dtrain::to_host(total);
  waited = true;
  const double waited_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  other.join();
  INFO("launches took " << launch_ms << " ms; waited " << waited_ms
                        << " ms; the other thread's copy returned after "
                        << copied_after_ms << " ms");
  CHECK(host.device().is_cpu());
  CHECK(std::isfinite(host.item<float>()));
  CHECK(waited_ms > 40.0); // the work outlasted the other thread's start
  CHECK(
      copied_while_waiting); // a copy to pageable memory would have held it up
}
