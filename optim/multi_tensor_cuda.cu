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
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <array>
#include <cstdint>

namespace dtrain::optim::cuda {
namespace {

// Depth: the number of tensor lists an op reads or writes.
template <int Depth>
constexpr int kMaxTensors = Depth <= 3 ? 64 : 40;
constexpr int kMaxBlocks = 320;
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

// Each thread moves kIlp elements per iteration, all loads issued before any use: with one
// element per thread, too few bytes are in flight to approach the memory bandwidth. An op
// reads the lists in Op::kReads and writes those in Op::kWrites (bit d: list d), on values in
// the op-math type.
constexpr int kIlp = 4;

template <int Depth, typename T, typename Op>
__global__ void __launch_bounds__(kThreads)
    multi_tensor_kernel(Batch<Depth> batch, const at::opmath_type<T>* factors, Op op) {
  using Math = at::opmath_type<T>;
  const int t = batch.tensor_of_block[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(batch.chunk_of_block[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < batch.numel[t] ? begin + kChunk : batch.numel[t];
  const Math factor = factors[batch.first_factor + t];
  T* data[Depth];
#pragma unroll
  for (int d = 0; d < Depth; ++d) data[d] = static_cast<T*>(batch.data[d][t]);
  for (int64_t base = begin + threadIdx.x; base < end; base += kThreads * kIlp) {
    Math values[kIlp][Depth];
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t k = base + j * kThreads;
#pragma unroll
      for (int d = 0; d < Depth; ++d) {
        values[j][d] = ((Op::kReads >> d) & 1) && k < end ? static_cast<Math>(data[d][k]) : Math(0);
      }
    }
#pragma unroll
    for (int j = 0; j < kIlp; ++j) op(values[j], factor);
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t k = base + j * kThreads;
      if (k >= end) continue;
#pragma unroll
      for (int d = 0; d < Depth; ++d) {
        if ((Op::kWrites >> d) & 1) data[d][k] = static_cast<T>(values[j][d]);
      }
    }
  }
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

// The sum of `value` over the block, in thread 0; the same order of additions every time.
template <typename Math>
__device__ Math block_sum(Math value) {
  __shared__ Math warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffff, value, offset);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  value = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : Math(0);
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2) {
      value += __shfl_down_sync(0xffffffff, value, offset);
    }
  }
  __syncthreads();  // warp_sums is free for the next call
  return value;
}

// Pass 1 of squared_norms: block b of the launch writes its chunk's sum of squares of each
// list to partials[d * total_blocks + first_block + b].
template <int Depth, typename T>
__global__ void __launch_bounds__(kThreads)
    chunk_squares_kernel(Batch<Depth> batch, at::opmath_type<T>* partials, int64_t first_block,
                         int64_t total_blocks) {
  using Math = at::opmath_type<T>;
  const int t = batch.tensor_of_block[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(batch.chunk_of_block[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < batch.numel[t] ? begin + kChunk : batch.numel[t];
  const T* data[Depth];
#pragma unroll
  for (int d = 0; d < Depth; ++d) data[d] = static_cast<const T*>(batch.data[d][t]);
  Math sums[Depth] = {};
  for (int64_t base = begin + threadIdx.x; base < end; base += kThreads * kIlp) {
    Math values[kIlp][Depth];
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      const int64_t k = base + j * kThreads;
#pragma unroll
      for (int d = 0; d < Depth; ++d) values[j][d] = k < end ? static_cast<Math>(data[d][k]) : Math(0);
    }
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
#pragma unroll
      for (int d = 0; d < Depth; ++d) sums[d] += values[j][d] * values[j][d];
    }
  }
#pragma unroll
  for (int d = 0; d < Depth; ++d) {
    const Math total = block_sum(sums[d]);
    if (threadIdx.x == 0) partials[d * total_blocks + first_block + blockIdx.x] = total;
  }
}

// Pass 2: block t adds the chunk sums of tensor first_tensor + t, in chunk order.
constexpr int kMaxSummed = 384;
struct ChunkRanges {
  int32_t first[kMaxSummed];
  int32_t count[kMaxSummed];
};
static_assert(sizeof(ChunkRanges) < 4096 - 128, "kernel parameters are limited to 4 KiB");

template <int Depth, typename Math>
__global__ void __launch_bounds__(kThreads)
    sum_chunks_kernel(ChunkRanges ranges, const Math* partials, int64_t total_blocks, Math* out,
                      int64_t n, int64_t first_tensor) {
  const int t = blockIdx.x;
#pragma unroll
  for (int d = 0; d < Depth; ++d) {
    Math sum = 0;
    for (int i = threadIdx.x; i < ranges.count[t]; i += kThreads) {
      sum += partials[d * total_blocks + ranges.first[t] + i];
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0) out[d * n + first_tensor + t] = sum;
  }
}

template <int Depth, typename T>
at::Tensor squared_norms_of(const std::array<const std::vector<at::Tensor>*, Depth>& lists) {
  using Math = at::opmath_type<T>;
  const std::vector<at::Tensor>& lead = *lists[0];
  const c10::cuda::CUDAGuard guard(lead.front().device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const auto n = static_cast<int64_t>(lead.size());
  std::vector<int32_t> first(lead.size());
  std::vector<int32_t> count(lead.size());
  int64_t total_blocks = 0;
  for (size_t i = 0; i < lead.size(); ++i) {
    first[i] = static_cast<int32_t>(total_blocks);
    count[i] = static_cast<int32_t>((lead[i].numel() + kChunk - 1) / kChunk);
    total_blocks += count[i];
  }
  const auto options = lead.front().options().dtype(c10::CppTypeToScalarType<Math>::value);
  const at::Tensor partials = at::empty({Depth * std::max<int64_t>(total_blocks, 1)}, options);
  at::Tensor out = at::empty({Depth, n}, options);
  Math* partial_data = partials.data_ptr<Math>();

  // Pass 1, batched as multi_tensor_apply batches; blocks are numbered across the launches.
  Batch<Depth> batch{};
  int tensors = 0;
  int blocks = 0;
  int64_t launched = 0;
  auto flush = [&] {
    if (blocks > 0) {
      chunk_squares_kernel<Depth, T>
          <<<blocks, kThreads, 0, stream>>>(batch, partial_data, launched, total_blocks);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      launched += blocks;
    }
    tensors = 0;
    blocks = 0;
  };
  auto add_tensor = [&](size_t i) {
    for (int d = 0; d < Depth; ++d) batch.data[d][tensors] = (*lists[d])[i].data_ptr();
    batch.numel[tensors] = lead[i].numel();
    ++tensors;
  };
  for (size_t i = 0; i < lead.size(); ++i) {
    if (tensors == kMaxTensors<Depth>) flush();
    add_tensor(i);
    for (int64_t c = 0; c < count[i]; ++c) {
      batch.tensor_of_block[blocks] = static_cast<uint8_t>(tensors - 1);
      batch.chunk_of_block[blocks] = static_cast<int32_t>(c);
      if (++blocks == kMaxBlocks) {
        flush();
        if (c + 1 < count[i]) add_tensor(i);
      }
    }
  }
  flush();

  // Pass 2.
  for (int64_t start = 0; start < n; start += kMaxSummed) {
    const int64_t m = std::min<int64_t>(kMaxSummed, n - start);
    ChunkRanges ranges{};
    for (int64_t j = 0; j < m; ++j) {
      ranges.first[j] = first[start + j];
      ranges.count[j] = count[start + j];
    }
    sum_chunks_kernel<Depth, Math><<<static_cast<unsigned int>(m), kThreads, 0, stream>>>(
        ranges, partial_data, total_blocks, out.data_ptr<Math>(), n, start);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

// ratio_i, as optim/trust_ratio.h defines it, from the squared norms [2, n].
template <typename Math>
__global__ void trust_ratio_kernel(const Math* sq_norms, int64_t n, Math* out, Math coefficient,
                                   Math weight_decay, Math eps, Math max_ratio) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Math w_norm = ::sqrt(sq_norms[i]);
  const Math u_norm = ::sqrt(sq_norms[n + i]);
  Math ratio = w_norm > 0 && u_norm > 0
                   ? coefficient * w_norm / (u_norm + weight_decay * w_norm + eps)
                   : Math(1);
  if (max_ratio > 0 && ratio > max_ratio) ratio = max_ratio;
  out[i] = ratio;
}

// values: y, x.
template <typename T>
struct AddScaled {
  using Math = at::opmath_type<T>;
  static constexpr int kReads = 0b11;
  static constexpr int kWrites = 0b01;
  Math alpha;
  __device__ void operator()(Math (&values)[2], Math factor) const {
    values[0] += alpha * factor * values[1];
  }
};

// values: w, g[, v].
template <typename T, bool kMomentum>
struct LarsStep {
  using Math = at::opmath_type<T>;
  static constexpr int kReads = kMomentum ? 0b111 : 0b11;
  static constexpr int kWrites = kMomentum ? 0b101 : 0b01;
  Math weight_decay;
  Math momentum;
  template <int Depth>
  __device__ void operator()(Math (&values)[Depth], Math factor) const {
    Math step = factor * (values[1] + weight_decay * values[0]);
    if constexpr (kMomentum) {
      step = momentum * values[2] + step;
      values[2] = step;
    }
    values[0] -= step;
  }
};

// values: w, g, m, v, u (written only); factor: the clip factor of g.
template <typename T>
struct LambDirection {
  using Math = at::opmath_type<T>;
  static constexpr int kReads = 0b01111;
  static constexpr int kWrites = 0b11100;
  Math beta1, beta2, eps, weight_decay, bias1, sqrt_bias2;
  __device__ void operator()(Math (&values)[5], Math factor) const {
    const Math g = factor * values[1];
    values[2] = beta1 * values[2] + (1 - beta1) * g;
    values[3] = beta2 * values[3] + (1 - beta2) * g * g;
    const Math denominator = ::sqrt(values[3]) / sqrt_bias2 + eps;
    values[4] = values[2] / denominator / bias1 + weight_decay * values[0];
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

at::Tensor squared_norms(const std::vector<at::Tensor>& first,
                         const std::vector<at::Tensor>* second) {
  at::Tensor out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, first.front().scalar_type(),
                                  "squared_norms", [&] {
                                    out = second ? squared_norms_of<2, scalar_t>({&first, second})
                                                 : squared_norms_of<1, scalar_t>({&first});
                                  });
  return out;
}

at::Tensor trust_ratios(const at::Tensor& sq_norms, double coefficient, double weight_decay,
                        double eps, double max_ratio) {
  const c10::cuda::CUDAGuard guard(sq_norms.device());
  const at::Tensor norms = sq_norms.contiguous();
  const int64_t n = norms.size(1);
  at::Tensor out = at::empty({n}, norms.options());
  if (n == 0) return out;
  constexpr int kRatioThreads = 256;
  const auto blocks = static_cast<unsigned int>((n + kRatioThreads - 1) / kRatioThreads);
  AT_DISPATCH_FLOATING_TYPES(norms.scalar_type(), "trust_ratios", [&] {
    trust_ratio_kernel<scalar_t><<<blocks, kRatioThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        norms.data_ptr<scalar_t>(), n, out.data_ptr<scalar_t>(),
        static_cast<scalar_t>(coefficient), static_cast<scalar_t>(weight_decay),
        static_cast<scalar_t>(eps), static_cast<scalar_t>(max_ratio));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace dtrain::optim::cuda
