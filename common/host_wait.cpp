#include "common/host_wait.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <chrono>
#include <thread>

namespace dtrain {

void wait_for_stream(torch::Device device) {
  if (!device.is_cuda()) return;
  c10::Event reached(c10::DeviceType::CUDA);
  reached.record(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device));
  // A spin first: most waits end within microseconds of the kernels they follow.
  for (int polls = 0; !reached.query(); ++polls) {
    if (polls > 100) std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
}

torch::Tensor to_host(const torch::Tensor& tensor) {
  if (!tensor.is_cuda()) return tensor;
  wait_for_stream(tensor.device());
  return tensor.cpu();
}

}  // namespace dtrain
