// Chunked multi-tensor kernels (the scheme of apex's multi_tensor_apply): a launch covers up to
// kMaxTensors<Depth> tensors and kMaxBlocks chunks of kChunk elements, each block one chunk,
// with the tensor addresses passed by value in the kernel's parameters. A ResNet-50 (161
// tensors, 25.6 M parameters) takes 2 launches a pass instead of 161. Arithmetic is in the
// op-math type (fp32 for 16-bit tensors) with per-tensor factors read on the device.
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
constexpr int kMaxTensors = Depth <= 3 ? 128 : 96;
// One wave of 512-thread blocks on an H100 (132 SMs x 4) and more: a pass over a ResNet-50
// is then one or two launches, not a third launch of a few blocks that leaves the GPU idle.
constexpr int kMaxBlocks = 1024;
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
// With the op's few scalars and pointers beside it: the limit of CUDA 12.1 and later.
static_assert(sizeof(Batch<5>) < 32764 - 256, "kernel parameters are limited to 32 KiB");

// Each thread moves kIlp consecutive elements per iteration, loaded as one vector where the
// tensor's addresses allow (16 bytes for fp32), all loads issued before any use: too few bytes
// in flight per thread cannot approach the memory bandwidth.
constexpr int kIlp = 4;

template <typename T>
struct alignas(sizeof(T) * kIlp) Pack {
  T v[kIlp];
};

// Whether every list's data of this block's tensor can be read and written as Packs (a chunk
// begins at a multiple of kIlp elements).
template <int Depth, typename T>
__device__ bool packs_aligned(T* const (&data)[Depth]) {
  bool aligned = true;
#pragma unroll
  for (int d = 0; d < Depth; ++d) {
    aligned &= reinterpret_cast<uintptr_t>(data[d]) % sizeof(Pack<T>) == 0;
  }
  return aligned;
}

// Elements k .. k + kIlp - 1 of the lists in `Reads` (bit d: list d) into values[j][d]; zeros
// past `end` and for the lists not read.
template <int Depth, int Reads, typename T, typename Math>
__device__ void load(Math (&values)[kIlp][Depth], T* const (&data)[Depth], int64_t k, int64_t end,
                     bool aligned) {
#pragma unroll
  for (int d = 0; d < Depth; ++d) {
    if (!((Reads >> d) & 1)) {
#pragma unroll
      for (int j = 0; j < kIlp; ++j) values[j][d] = Math(0);
    } else if (aligned && k + kIlp <= end) {
      const Pack<T> pack = *reinterpret_cast<const Pack<T>*>(data[d] + k);
#pragma unroll
      for (int j = 0; j < kIlp; ++j) values[j][d] = static_cast<Math>(pack.v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < kIlp; ++j) {
        values[j][d] = k + j < end ? static_cast<Math>(data[d][k + j]) : Math(0);
      }
    }
  }
}

// The lists in `Writes` back from values[j][d], elements k .. k + kIlp - 1 below `end`.
template <int Depth, int Writes, typename T, typename Math>
__device__ void store(const Math (&values)[kIlp][Depth], T* const (&data)[Depth], int64_t k,
                      int64_t end, bool aligned) {
#pragma unroll
  for (int d = 0; d < Depth; ++d) {
    if (!((Writes >> d) & 1)) continue;
    if (aligned && k + kIlp <= end) {
      Pack<T> pack;
#pragma unroll
      for (int j = 0; j < kIlp; ++j) pack.v[j] = static_cast<T>(values[j][d]);
      *reinterpret_cast<Pack<T>*>(data[d] + k) = pack;
    } else {
#pragma unroll
      for (int j = 0; j < kIlp; ++j) {
        if (k + j < end) data[d][k + j] = static_cast<T>(values[j][d]);
      }
    }
  }
}

// The sum of `value` over the block, in thread 0; the same order of additions every time.
template <typename Math>
__device__ Math block_sum(Math value) {
  __shared__ Math warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_down_sync(0xffffffff, value, offset);
  }
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

// The block's chunk: its tensor's data, the element range, the tensor's factor (1 without).
template <int Depth, typename T>
struct Chunk {
  T* data[Depth];
  int64_t begin, end;
  at::opmath_type<T> factor;

  __device__ Chunk(const Batch<Depth>& batch, const at::opmath_type<T>* factors) {
    const int t = batch.tensor_of_block[blockIdx.x];
    begin = static_cast<int64_t>(batch.chunk_of_block[blockIdx.x]) * kChunk;
    end = begin + kChunk < batch.numel[t] ? begin + kChunk : batch.numel[t];
    factor = factors ? factors[batch.first_factor + t] : at::opmath_type<T>(1);
#pragma unroll
    for (int d = 0; d < Depth; ++d) data[d] = static_cast<T*>(batch.data[d][t]);
  }
};

// An op reads the lists in Op::kReads and writes those in Op::kWrites (bit d: list d), on
// values in the op-math type: op(values, factor).
template <int Depth, typename T, typename Op>
__global__ void __launch_bounds__(kThreads)
    multi_tensor_kernel(Batch<Depth> batch, const at::opmath_type<T>* factors, Op op) {
  using Math = at::opmath_type<T>;
  const Chunk<Depth, T> chunk(batch, factors);
  const bool aligned = packs_aligned<Depth, T>(chunk.data);
  for (int64_t k = chunk.begin + threadIdx.x * kIlp; k < chunk.end; k += kThreads * kIlp) {
    Math values[kIlp][Depth];
    load<Depth, Op::kReads>(values, chunk.data, k, chunk.end, aligned);
#pragma unroll
    for (int j = 0; j < kIlp; ++j) op(values[j], chunk.factor);
    store<Depth, Op::kWrites>(values, chunk.data, k, chunk.end, aligned);
  }
}

// The same, and the op also gives Op::kSums quantities per element, op(values, factor, sums),
// whose sums over the chunk block b of the launch writes to
// partials[s * total_blocks + first_block + b].
template <int Depth, typename T, typename Op>
__global__ void __launch_bounds__(kThreads)
    chunk_sums_kernel(Batch<Depth> batch, const at::opmath_type<T>* factors, Op op,
                      at::opmath_type<T>* partials, int64_t first_block, int64_t total_blocks) {
  using Math = at::opmath_type<T>;
  const Chunk<Depth, T> chunk(batch, factors);
  const bool aligned = packs_aligned<Depth, T>(chunk.data);
  Math sums[Op::kSums] = {};
  for (int64_t k = chunk.begin + threadIdx.x * kIlp; k < chunk.end; k += kThreads * kIlp) {
    Math values[kIlp][Depth];
    load<Depth, Op::kReads>(values, chunk.data, k, chunk.end, aligned);
#pragma unroll
    for (int j = 0; j < kIlp; ++j) {
      Math terms[Op::kSums];
      op(values[j], chunk.factor, terms);
      if (k + j < chunk.end) {
#pragma unroll
        for (int s = 0; s < Op::kSums; ++s) sums[s] += terms[s];
      }
    }
    store<Depth, Op::kWrites>(values, chunk.data, k, chunk.end, aligned);
  }
#pragma unroll
  for (int s = 0; s < Op::kSums; ++s) {
    const Math total = block_sum(sums[s]);
    if (threadIdx.x == 0) partials[s * total_blocks + first_block + blockIdx.x] = total;
  }
}

// Pass 2 of a chunk sum: block t adds the chunk sums of tensor first_tensor + t, in chunk
// order, into out[s * n + first_tensor + t].
constexpr int kMaxSummed = 1024;
struct ChunkRanges {
  int32_t first[kMaxSummed];
  int32_t count[kMaxSummed];
};

template <int Sums, typename Math>
__global__ void __launch_bounds__(kThreads)
    sum_chunks_kernel(ChunkRanges ranges, const Math* partials, int64_t total_blocks, Math* out,
                      int64_t n, int64_t first_tensor) {
  const int t = blockIdx.x;
#pragma unroll
  for (int s = 0; s < Sums; ++s) {
    Math sum = 0;
    for (int i = threadIdx.x; i < ranges.count[t]; i += kThreads) {
      sum += partials[s * total_blocks + ranges.first[t] + i];
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0) out[s * n + first_tensor + t] = sum;
  }
}

// Splits the lists into launches of at most kMaxTensors<Depth> tensors and kMaxBlocks chunks,
// calling launch(batch, blocks, first_block) for each; blocks are numbered across the launches
// in chunk order.
template <int Depth, typename Launch>
void for_each_batch(const std::array<const std::vector<at::Tensor>*, Depth>& lists,
                    const Launch& launch, int64_t chunk_numel = kChunk) {
  const std::vector<at::Tensor>& lead = *lists[0];
  Batch<Depth> batch{};
  int tensors = 0;
  int blocks = 0;
  int64_t launched = 0;
  auto flush = [&] {
    if (blocks > 0) {
      launch(batch, blocks, launched);
      launched += blocks;
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
    const int64_t chunks = (lead[i].numel() + chunk_numel - 1) / chunk_numel;
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

// The factors in the op-math type, contiguous; undefined stays undefined (factor 1).
template <typename T>
at::Tensor opmath_factors(const at::Tensor& factors) {
  return factors.defined()
             ? factors.to(c10::CppTypeToScalarType<at::opmath_type<T>>::value).contiguous()
             : factors;
}

template <typename T>
const at::opmath_type<T>* data_or_null(const at::Tensor& factors) {
  return factors.defined() ? factors.data_ptr<at::opmath_type<T>>() : nullptr;
}

// A copy moves 6-8 bytes an element and computes nothing, so its blocks take smaller chunks:
// a bucket of a few million elements in kChunk-sized blocks would fill about one block per SM,
// too few bytes in flight to approach the memory bandwidth (ATen's _foreach_copy_, which
// chunks that way, moves a bucket at about a third of it).
constexpr int64_t kCopyChunk = 1 << 13;

template <typename Src, typename Dst>
__global__ void __launch_bounds__(kThreads) copy_kernel(Batch<2> batch) {
  using Math = at::opmath_type<Dst>;
  const int t = batch.tensor_of_block[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(batch.chunk_of_block[blockIdx.x]) * kCopyChunk;
  const int64_t end = begin + kCopyChunk < batch.numel[t] ? begin + kCopyChunk : batch.numel[t];
  const auto* source = static_cast<const Src*>(batch.data[0][t]);
  auto* target = static_cast<Dst*>(batch.data[1][t]);
  const bool aligned = reinterpret_cast<uintptr_t>(source) % sizeof(Pack<Src>) == 0 &&
                       reinterpret_cast<uintptr_t>(target) % sizeof(Pack<Dst>) == 0;
  for (int64_t k = begin + threadIdx.x * kIlp; k < end; k += kThreads * kIlp) {
    if (aligned && k + kIlp <= end) {
      const Pack<Src> in = *reinterpret_cast<const Pack<Src>*>(source + k);
      Pack<Dst> out;
#pragma unroll
      for (int j = 0; j < kIlp; ++j) out.v[j] = static_cast<Dst>(static_cast<Math>(in.v[j]));
      *reinterpret_cast<Pack<Dst>*>(target + k) = out;
    } else {
      for (int64_t j = k; j < k + kIlp && j < end; ++j) {
        target[j] = static_cast<Dst>(static_cast<Math>(source[j]));
      }
    }
  }
}

// Runs `op` over every element of the tuples (lists[0][i], ..., lists[Depth-1][i]).
template <int Depth, typename T, typename Op>
void multi_tensor_apply(const std::array<const std::vector<at::Tensor>*, Depth>& lists,
                        const at::Tensor& factors, const Op& op) {
  const c10::cuda::CUDAGuard guard(lists[0]->front().device());
  const at::Tensor math_factors = opmath_factors<T>(factors);
  const auto* factor_data = data_or_null<T>(math_factors);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  for_each_batch<Depth>(lists, [&](const Batch<Depth>& batch, int blocks, int64_t) {
    multi_tensor_kernel<Depth, T><<<blocks, kThreads, 0, stream>>>(batch, factor_data, op);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

// Runs `op` like multi_tensor_apply and returns [Op::kSums, n] in the op-math type: the sums of
// its quantities over each tensor. Two passes with a fixed order of additions: the same result
// every run.
template <int Depth, typename T, typename Op>
at::Tensor multi_tensor_sums(const std::array<const std::vector<at::Tensor>*, Depth>& lists,
                             const at::Tensor& factors, const Op& op) {
  using Math = at::opmath_type<T>;
  const std::vector<at::Tensor>& lead = *lists[0];
  const c10::cuda::CUDAGuard guard(lead.front().device());
  const at::Tensor math_factors = opmath_factors<T>(factors);
  const auto* factor_data = data_or_null<T>(math_factors);
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
  const at::Tensor partials = at::empty({Op::kSums * std::max<int64_t>(total_blocks, 1)}, options);
  at::Tensor out = at::empty({Op::kSums, n}, options);
  Math* partial_data = partials.data_ptr<Math>();

  for_each_batch<Depth>(lists, [&](const Batch<Depth>& batch, int blocks, int64_t first_block) {
    chunk_sums_kernel<Depth, T><<<blocks, kThreads, 0, stream>>>(
        batch, factor_data, op, partial_data, first_block, total_blocks);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  for (int64_t start = 0; start < n; start += kMaxSummed) {
    const int64_t m = std::min<int64_t>(kMaxSummed, n - start);
    ChunkRanges ranges{};
    for (int64_t j = 0; j < m; ++j) {
      ranges.first[j] = first[start + j];
      ranges.count[j] = count[start + j];
    }
    sum_chunks_kernel<Op::kSums, Math><<<static_cast<unsigned int>(m), kThreads, 0, stream>>>(
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

// values: the lists whose squares are summed.
template <typename T, int Depth>
struct Squares {
  using Math = at::opmath_type<T>;
  static constexpr int kReads = (1 << Depth) - 1;
  static constexpr int kWrites = 0;
  static constexpr int kSums = Depth;
  __device__ void operator()(const Math (&values)[Depth], Math,
                             Math (&terms)[Depth]) const {
#pragma unroll
    for (int d = 0; d < Depth; ++d) terms[d] = values[d] * values[d];
  }
};

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

// values: w, g, b. torch::optim::SGD's step once the momentum buffer b exists.
template <typename T>
struct SgdStep {
  using Math = at::opmath_type<T>;
  static constexpr int kReads = 0b111;
  static constexpr int kWrites = 0b101;
  Math lr, weight_decay, momentum, dampening;
  bool nesterov;
  __device__ void operator()(Math (&values)[3], Math) const {
    const Math d = values[1] + weight_decay * values[0];
    values[2] = momentum * values[2] + (1 - dampening) * d;
    values[0] -= lr * (nesterov ? d + momentum * values[2] : values[2]);
  }
};

// LAMB's arithmetic: the moments' update from the (clipped) gradient, and the direction u from
// the updated moments and the weight.
template <typename Math>
struct LambMath {
  Math beta1, beta2, eps, weight_decay, bias1, sqrt_bias2;

  __device__ void update_moments(Math g, Math& m, Math& v) const {
    m = beta1 * m + (1 - beta1) * g;
    v = beta2 * v + (1 - beta2) * g * g;
  }
  __device__ Math direction(Math w, Math m, Math v) const {
    return m / (::sqrt(v) / sqrt_bias2 + eps) / bias1 + weight_decay * w;
  }
};

template <typename Math>
LambMath<Math> lamb_math(const LambScalars& s) {
  return {static_cast<Math>(s.beta1),        static_cast<Math>(s.beta2),
          static_cast<Math>(s.eps),          static_cast<Math>(s.weight_decay),
          static_cast<Math>(s.bias1),        static_cast<Math>(s.sqrt_bias2)};
}

// values: w, g, m, v, u (written only); factor: the clip factor of g.
template <typename T>
struct LambDirection {
  using Math = at::opmath_type<T>;
  static constexpr int kReads = 0b01111;
  static constexpr int kWrites = 0b11100;
  LambMath<Math> lamb;
  __device__ void operator()(Math (&values)[5], Math factor) const {
    lamb.update_moments(factor * values[1], values[2], values[3]);
    values[4] = lamb.direction(values[0], values[2], values[3]);
  }
};

// values: w, g, m, v; factor: the clip factor of g. Updates m and v, sums w^2 and u^2.
template <typename T>
struct LambMoments {
  using Math = at::opmath_type<T>;
  static constexpr int kReads = 0b1111;
  static constexpr int kWrites = 0b1100;
  static constexpr int kSums = 2;
  LambMath<Math> lamb;
  __device__ void operator()(Math (&values)[4], Math factor, Math (&terms)[2]) const {
    lamb.update_moments(factor * values[1], values[2], values[3]);
    const Math u = lamb.direction(values[0], values[2], values[3]);
    terms[0] = values[0] * values[0];
    terms[1] = u * u;
  }
};

// values: w, m, v; factor: the trust ratio. w += alpha * factor * u, u from the moments.
template <typename T>
struct LambApply {
  using Math = at::opmath_type<T>;
  static constexpr int kReads = 0b111;
  static constexpr int kWrites = 0b001;
  LambMath<Math> lamb;
  Math alpha;
  __device__ void operator()(Math (&values)[3], Math factor) const {
    values[0] += alpha * factor * lamb.direction(values[0], values[1], values[2]);
  }
};

}  // namespace

void copy_(const std::vector<at::Tensor>& targets, const std::vector<at::Tensor>& sources) {
  const c10::cuda::CUDAGuard guard(targets.front().device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, sources.front().scalar_type(),
                                  "copy_", [&] {
    using Src = scalar_t;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, targets.front().scalar_type(),
                                    "copy_", [&] {
      for_each_batch<2>(
          {&sources, &targets},
          [&](const Batch<2>& batch, int blocks, int64_t) {
            copy_kernel<Src, scalar_t><<<blocks, kThreads, 0, stream>>>(batch);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
          },
          kCopyChunk);
    });
  });
}

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

void sgd_update_(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                 const std::vector<at::Tensor>& buffers, const SgdScalars& scalars) {
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, params.front().scalar_type(), "sgd_update_", [&] {
        using Math = at::opmath_type<scalar_t>;
        multi_tensor_apply<3, scalar_t>(
            {&params, &grads, &buffers}, at::Tensor(),
            SgdStep<scalar_t>{static_cast<Math>(scalars.lr),
                              static_cast<Math>(scalars.weight_decay),
                              static_cast<Math>(scalars.momentum),
                              static_cast<Math>(scalars.dampening), scalars.nesterov});
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
        multi_tensor_apply<5, scalar_t>({&params, &grads, &exp_avgs, &exp_avg_sqs, &updates},
                                        clip_factors,
                                        LambDirection<scalar_t>{lamb_math<Math>(scalars)});
      });
}

at::Tensor lamb_moments_(const std::vector<at::Tensor>& params,
                         const std::vector<at::Tensor>& grads,
                         const std::vector<at::Tensor>& exp_avgs,
                         const std::vector<at::Tensor>& exp_avg_sqs,
                         const at::Tensor& clip_factors, const LambScalars& scalars) {
  at::Tensor sq_norms;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, params.front().scalar_type(), "lamb_moments_", [&] {
        using Math = at::opmath_type<scalar_t>;
        sq_norms = multi_tensor_sums<4, scalar_t>(
            {&params, &grads, &exp_avgs, &exp_avg_sqs}, clip_factors,
            LambMoments<scalar_t>{lamb_math<Math>(scalars)});
      });
  return sq_norms;
}

void lamb_apply_(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& exp_avgs,
                 const std::vector<at::Tensor>& exp_avg_sqs, const at::Tensor& factors,
                 const LambScalars& scalars, double alpha) {
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, params.front().scalar_type(), "lamb_apply_", [&] {
        using Math = at::opmath_type<scalar_t>;
        multi_tensor_apply<3, scalar_t>(
            {&params, &exp_avgs, &exp_avg_sqs}, factors,
            LambApply<scalar_t>{lamb_math<Math>(scalars), static_cast<Math>(alpha)});
      });
}

at::Tensor squared_norms(const std::vector<at::Tensor>& first,
                         const std::vector<at::Tensor>* second) {
  at::Tensor out;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, first.front().scalar_type(), "squared_norms", [&] {
        out = second ? multi_tensor_sums<2, scalar_t>({&first, second}, at::Tensor(),
                                                      Squares<scalar_t, 2>{})
                     : multi_tensor_sums<1, scalar_t>({&first}, at::Tensor(),
                                                      Squares<scalar_t, 1>{});
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
