// Optimizer step time against the memory-bandwidth floor, on ResNet-50's parameters (25.6 M,
// fp32, with random gradients): SGD with momentum, LARS and LAMB as the trainer builds them
// (optim::make_optimizer, default parameter groups).
//   usage: build/bench_optim [cuda|cpu] [steps]      (default: cuda when available, 20 steps)
// Steps are timed in one batch behind a sleep kernel: more than a few dozen would fill the
// device's queue of pending launches, and the host would then wait for the device.
// The floor is the bytes an update must move over the copy bandwidth of the same device,
// measured in the same run (a 1 GiB tensor copy on a GPU, 256 MiB on a CPU, counting its read
// and its write). Bytes per parameter, fp32: SGD reads w, g, m and writes w, m (20 B). LARS must
// know ||w|| and ||g|| before it updates, so it also reads w and g once more (28 B). LAMB reads
// g, m, v and writes m, v, reads w for ||w|| and ||u|| (u comes from m, v, w), then reads w, m,
// v and writes w (40 B).
#include "common/host_memory.h"
#include "models/registry.h"
#include "optim/multi_tensor.h"
#include "optim/optimizer.h"

#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <string>

#ifdef DTRAIN_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// Median-free and simple: the mean of `steps` calls after `warmup` untimed ones.
template <typename Fn>
double mean_ms(const torch::Device& device, int warmup, int steps, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  synchronize(device);
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) fn();
  synchronize(device);
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count() / steps;
}

struct CallMs {
  double host;  // the host's own time to issue a call
  double gpu;   // the kernels' time per call, without launch gaps
};

// Both per call: `calls` calls issued behind a sleep kernel long enough to cover their
// launches, so the host's time is its own (the device is busy, nothing waits for it) and the
// time between the two events is the kernels' own. (On a CPU, or a build without CUDA:
// nothing to separate, the wall time for both.)
template <typename Fn>
CallMs call_ms(const torch::Device& device, int calls, Fn&& fn) {
#ifdef DTRAIN_CUDA
  if (device.is_cuda()) {
    for (int i = 0; i < 3; ++i) fn();
    at::cuda::CUDAEvent start(cudaEventDefault);
    at::cuda::CUDAEvent end(cudaEventDefault);
    torch::cuda::synchronize();
    at::cuda::sleep(int64_t{1000} * 1000 * 1000);  // ~0.5 s at ~2 GHz
    start.record();
    const auto issue_start = Clock::now();
    for (int i = 0; i < calls; ++i) fn();
    const double host_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - issue_start).count() / calls;
    end.record();
    end.synchronize();
    return {host_ms, start.elapsed_time(end) / calls};
  }
#endif
  const double ms = mean_ms(device, 3, calls, fn);
  return {ms, ms};
}

}  // namespace

int main(int argc, char** argv) {
  dtrain::keep_freed_host_memory();  // as the trainer does (common/host_memory.h)
  const std::string requested = argc > 1 ? argv[1] : (torch::cuda::is_available() ? "cuda" : "cpu");
  const int steps = argc > 2 ? std::stoi(argv[2]) : 20;
  const torch::Device device = requested == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::kCPU;
  torch::NoGradGuard no_grad;

  const int64_t copy_bytes = device.is_cuda() ? (1LL << 30) : (256LL << 20);
  torch::Tensor source = torch::rand({copy_bytes / 4}, torch::device(device));
  torch::Tensor target = torch::empty_like(source);
  const double copy_ms = mean_ms(device, 3, 10, [&] { target.copy_(source); });
  const double bandwidth = 2.0 * copy_bytes / (copy_ms * 1e-3);  // bytes per second
  source = target = torch::Tensor();

  dtrain::models::ModelOptions model_options;
  model_options.name = "resnet50";
  auto model = dtrain::models::make_model(model_options, {3, 224, 224}, 1000);
  model->to(device);
  std::vector<torch::Tensor> params = model->parameters();
  int64_t numel = 0;
  for (torch::Tensor& param : params) {
    param.mutable_grad() = torch::randn_like(param) * 1e-3;
    numel += param.numel();
  }
  fmt::print("{}: copy bandwidth {:.0f} GB/s; ResNet-50, {} tensors, {:.1f} M parameters\n",
             device.str(), bandwidth / 1e9, params.size(), numel / 1e6);
  // host: the host's own time to issue a step; GPU: the kernels' own time per step (call_ms).
  // A step is launch-bound where host > GPU.
  fmt::print("{:>6} {:>10} {:>10} {:>10} {:>10}\n", "optim", "host ms", "GPU ms", "floor ms",
             "floor/GPU");

  struct Case {
    const char* name;
    double bytes_per_param;
  };
  for (const Case& c : {Case{"sgd", 20.0}, Case{"lars", 28.0}, Case{"lamb", 40.0}}) {
    dtrain::optim::OptimizerOptions options;
    options.name = c.name;
    options.lr = c.name == std::string("lamb") ? 1e-3 : 0.1;
    options.decay_norm_and_bias = false;
    // Fresh weights per optimizer would not change the traffic; the step runs in place.
    auto optimizer = dtrain::optim::make_optimizer(options, params);
    const CallMs ms = call_ms(device, steps, [&] { optimizer->step(); });
    const double floor_ms = c.bytes_per_param * numel / bandwidth * 1e3;
    fmt::print("{:>6} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.2f}\n", c.name, ms.host, ms.gpu,
               floor_ms, floor_ms / ms.gpu);
  }

  // The step LARS and LAMB share: each tensor scaled by its own factor, held on the device.
  // ATen's list form with one 0-d tensor per entry (one kernel per tensor) against
  // optim::add_scaled_ (multi-tensor kernels where built), both w += f_i * g_i.
  const torch::Tensor factors = torch::rand({static_cast<int64_t>(params.size())},
                                            torch::device(device)) * 1e-3;
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& param : params) grads.push_back(param.grad());
  auto aten = [&] { at::_foreach_add_(params, at::_foreach_mul(grads, factors.unbind(0))); };
  auto fused = [&] { dtrain::optim::add_scaled_(params, grads, factors, 1.0); };
  const CallMs aten_ms = call_ms(device, steps, aten);
  const CallMs fused_ms = call_ms(device, steps, fused);
  fmt::print("w += f_i * g_i, host / GPU ms: ATen per-tensor {:.3f} / {:.3f}, add_scaled_ {:.3f} "
             "/ {:.3f} ({}); floor {:.3f} ms (12 B/param)\n",
             aten_ms.host, aten_ms.gpu, fused_ms.host, fused_ms.gpu,
             dtrain::optim::has_multi_tensor_kernels(device) ? "multi-tensor kernels" : "ATen",
             12.0 * numel / bandwidth * 1e3);
  return 0;
}
