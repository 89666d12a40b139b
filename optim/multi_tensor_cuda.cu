// Chunked multi-tensor kernels (the scheme of apex's multi_tensor_apply): a launch covers up to
// kMaxTensors<Depth> tensors and kMaxBlocks chunks of kChunk elements, each block one chunk,
// with the tensor addresses passed by value in the kernel's parameters (under the classic 4 KiB
// limit). A ResNet-50 (161 tensors, 25.6 M parameters) takes 3-5 launches instead of 161.
// Arithmetic is in the op-math type (fp32 for 16-bit tensors) with per-tensor factors read on
// the device.
#include "optim/multi_tensor_cuda.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <array>
#include <cstdint>

namespace dtrain::optim::cuda {
namespace {

// Depth: the number of tensor lists an op reads or writes.
template <int Depth>
constexpr int kMaxTensors = Depth <= 3 ? 64 : 40;
constexpr int kMaxBlocks = 192;
constexpr int64_t kChunk = 1 << 16;
constexpr int kThreads = 512;

// Tensor t of this launch is entry first_factor + t of the factors.
template <int Depth>
struct Batch {
  void* data[Depth][kMaxTensors<Depth>];
  int64_t numel[kMaxTensors<Depth>];
  int64_t first_factor;
  uint8_t tensor_of_block[kMaxBlocks];
  int32_t chunk_of_block[kMaxBlocks];
};
// With the op's few scalars and the factor pointer beside it.
static_assert(sizeof(Batch<3>) < 4096 - 128 && sizeof(Batch<5>) < 4096 - 128,
              "kernel parameters are limited to 4 KiB");

template <int Depth, typename T, typename Op>
__global__ void __launch_bounds__(kThreads)
    multi_tensor_kernel(Batch<Depth> batch, const at::opmath_type<T>* factors, Op op) {
  const int t = batch.tensor_of_block[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(batch.chunk_of_block[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < batch.numel[t] ? begin + kChunk : batch.numel[t];
  const at::opmath_type<T> factor = factors[batch.first_factor + t];
  T* data[Depth];
  for (int d = 0; d < Depth; ++d) data[d] = static_cast<T*>(batch.data[d][t]);
  for (int64_t k = begin + threadIdx.x; k < end; k += kThreads) op(data, k, factor);
}

// Runs `op` over every element of the tuples (lists[0][i], ..., lists[Depth-1][i]).
template <int Depth, typename T, typename Op>
void multi_tensor_apply(const std::array<const std::vector<at::Tensor>*, Depth>& lists,
                        const at::Tensor& factors, const Op& op) {
  const std::vector<at::Tensor>& lead = *lists[0];
  const c10::cuda::CUDAGuard guard(lead.front().device());
  const at::Tensor opmath_factors =
      factors.to(c10::CppTypeToScalarType<at::opmath_type<T>>::value).contiguous();
  const auto* factor_data = opmath_factors.data_ptr<at::opmath_type<T>>();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();

  Batch<Depth> batch{};
  int tensors = 0;
  int blocks = 0;
  auto flush = [&] {
    if (blocks > 0) {
      multi_tensor_kernel<Depth, T><<<blocks, kThreads, 0, stream>>>(batch, factor_data, op);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    tensors = 0;
    blocks = 0;
  };
  auto add_tensor = [&](size_t i) {
    if (tensors == 0) batch.first_factor = static_cast<int64_t>(i);
    for (int d = 0; d < Depth; ++d) batch.data[d][tensors] = (*lists[d])[i].data_ptr();
    batch.numel[tensors] = lead[i].numel();
    ++tensors;
  };
  for (size_t i = 0; i < lead.size(); ++i) {
    if (tensors == kMaxTensors<Depth>) flush();
    add_tensor(i);
    const int64_t chunks = (lead[i].numel() + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      batch.tensor_of_block[blocks] = static_cast<uint8_t>(tensors - 1);
      batch.chunk_of_block[blocks] = static_cast<int32_t>(c);
      if (++blocks == kMaxBlocks) {
        flush();
        if (c + 1 < chunks) add_tensor(i);  // the rest of tensor i opens the next launch
      }
    }
  }
  flush();
}

template <typename T>
struct AddScaled {
  using Math = at::opmath_type<T>;
  Math alpha;
  __device__ void operator()(T* const* data, int64_t k, Math factor) const {
    data[0][k] = static_cast<T>(static_cast<Math>(data[0][k]) +
                                alpha * factor * static_cast<Math>(data[1][k]));
  }
};

// data: w, g[, v].
template <typename T, bool kMomentum>
struct LarsStep {
  using Math = at::opmath_type<T>;
  Math weight_decay;
  Math momentum;
  __device__ void operator()(T* const* data, int64_t k, Math factor) const {
    const Math w = static_cast<Math>(data[0][k]);
    Math step = factor * (static_cast<Math>(data[1][k]) + weight_decay * w);
    if constexpr (kMomentum) {
      step = momentum * static_cast<Math>(data[2][k]) + step;
      data[2][k] = static_cast<T>(step);
    }
    data[0][k] = static_cast<T>(w - step);
  }
};

// data: w, g, m, v, u; factor: the clip factor of g.
template <typename T>
struct LambDirection {
  using Math = at::opmath_type<T>;
  Math beta1, beta2, eps, weight_decay, bias1, sqrt_bias2;
  __device__ void operator()(T* const* data, int64_t k, Math factor) const {
    const Math g = factor * static_cast<Math>(data[1][k]);
    const Math m = beta1 * static_cast<Math>(data[2][k]) + (1 - beta1) * g;
    const Math v = beta2 * static_cast<Math>(data[3][k]) + (1 - beta2) * g * g;
    data[2][k] = static_cast<T>(m);
    data[3][k] = static_cast<T>(v);
    const Math denominator = ::sqrt(v) / sqrt_bias2 + eps;
    data[4][k] = static_cast<T>(m / denominator / bias1 +
                                weight_decay * static_cast<Math>(data[0][k]));
  }
};

}  // namespace

void add_scaled_(const std::vector<at::Tensor>& targets, const std::vector<at::Tensor>& sources,
                 const at::Tensor& factors, double alpha) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, targets.front().scalar_type(),
                                  "add_scaled_", [&] {
                                    using Math = at::opmath_type<scalar_t>;
                                    multi_tensor_apply<2, scalar_t>(
                                        {&targets, &sources}, factors,
                                        AddScaled<scalar_t>{static_cast<Math>(alpha)});
                                  });
}

void lars_update_(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                  const std::vector<at::Tensor>& buffers, const at::Tensor& factors,
                  double weight_decay, double momentum) {
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, params.front().scalar_type(), "lars_update_", [&] {
        using Math = at::opmath_type<scalar_t>;
        const auto wd = static_cast<Math>(weight_decay);
        const auto mu = static_cast<Math>(momentum);
        if (buffers.empty()) {
          multi_tensor_apply<2, scalar_t>({&params, &grads}, factors,
                                          LarsStep<scalar_t, false>{wd, mu});
        } else {
          multi_tensor_apply<3, scalar_t>({&params, &grads, &buffers}, factors,
                                          LarsStep<scalar_t, true>{wd, mu});
        }
      });
}

void lamb_directions_(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs,
                      const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& updates, const at::Tensor& clip_factors,
                      const LambScalars& scalars) {
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, params.front().scalar_type(), "lamb_directions_", [&] {
        using Math = at::opmath_type<scalar_t>;
        const LambDirection<scalar_t> op{
            static_cast<Math>(scalars.beta1),  static_cast<Math>(scalars.beta2),
            static_cast<Math>(scalars.eps),    static_cast<Math>(scalars.weight_decay),
            static_cast<Math>(scalars.bias1),  static_cast<Math>(scalars.sqrt_bias2)};
        multi_tensor_apply<5, scalar_t>({&params, &grads, &exp_avgs, &exp_avg_sqs, &updates},
                                        clip_factors, op);
      });
}

}  // namespace dtrain::optim::cuda
