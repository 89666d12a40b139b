// How PowerSGD lays out one bucket: which parameters it compresses, grouped so that each
// group's products are batched operations on a strided view of the bucket (no copy), where
// each group's factors sit in the two all-reduce payloads, and the indices that move the
// tensors sent as they are into and out of the first payload, and the Ps into and out of
// one padded batch, in one operation each way; and which of the exact tensors' chunks fall in
// the part of the bucket this rank keeps (dist/compression/share.h).
#pragma once

#include "dist/compression/share.h"
#include "dist/reducer.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace dtrain::dist::compression {

// Matrices of one shape [rows, cols], compressed at one rank, whose offsets in the bucket
// are evenly spaced (the same layer in consecutive identical blocks, as in a ResNet stage):
// the bucket viewed as [size, rows, cols] with strides [stride, cols, 1] holds them all.
struct PowerSgdGroup {
  int64_t rows = 0, cols = 0, rank = 0;
  std::vector<int64_t> params;  // parameter indices, in bucket order
  int64_t offset = 0;           // of its first matrix in the bucket
  int64_t stride = 0;           // elements from one matrix to the next
  int64_t first = 0;            // index of its first matrix among the bucket's
  int64_t p_offset = 0;         // of its P [size, rows, rank] in the first payload
  int64_t q_offset = 0;         // of its Q [size, cols, rank] in the second payload
  int64_t size() const { return static_cast<int64_t>(params.size()); }
};

struct PowerSgdPlan {
  BucketLayout layout;
  std::vector<PowerSgdGroup> groups;
  // The bucket seen as [numel / chunk, chunk], chunk the gcd of every offset and size (and
  // of the kept range's), so that each parameter is whole chunks: the rows holding the
  // tensors averaged as they are (biases, norms, matrices rank r would not shrink), in
  // bucket order. Int64 on the bucket's device.
  int64_t chunk = 1;
  torch::Tensor exact_chunks;
  // The part of the bucket this rank keeps; of the exact rows, those in it are
  // [kept_exact_first, + kept_exact_chunks.numel()) of exact_chunks, and kept_exact_chunks
  // their rows in the kept part seen as [kept.numel / chunk, chunk]. Int64 on the device.
  Range kept;
  int64_t kept_exact_first = 0;
  torch::Tensor kept_exact_chunks;
  int64_t exact_numel = 0;  // elements averaged as they are, at the head of the first payload
  int64_t p_numel = 0;      // every P: the rest of the first payload
  int64_t q_numel = 0;      // every Q: the second payload
  int64_t num_matrices = 0, max_rows = 0, max_rank = 0;
  // Every P transposed into one zero-padded batch [num_matrices, max_rank, max_rows], to be
  // orthogonalised at once: where each element of the Ps (in payload order) goes. Int64 on
  // the bucket's device.
  torch::Tensor padded_index;
};

// Whether PowerSGD at rank `rank` compresses a parameter of `shape`: a matrix [n, m] (the
// parameter viewed as [size(0), rest]) whose rank r = min(rank, n, m) factors are smaller,
// (n + m) r < n m; tensors of one dimension never are.
bool compressed_at(const std::vector<int64_t>& shape, int64_t rank);
// Whether it compresses any of `shapes`.
bool any_compressed(const std::vector<std::vector<int64_t>>& shapes, int64_t rank);

// The plan of a bucket laid out as `layout` (offsets ascending, as packed_layout's), whose
// parameters have `shapes` (by parameter index), compressing at rank `rank`, this rank
// keeping `kept` of it; its indices on `device`. A matrix [n, m] (a parameter viewed as
// [size(0), rest]) is compressed when rank r = min(rank, n, m) shrinks it: (n + m) r < n m;
// tensors of one dimension never are.
PowerSgdPlan plan_powersgd(const BucketLayout& layout,
                           const std::vector<std::vector<int64_t>>& shapes, int64_t rank,
                           torch::Device device, Range kept);

}  // namespace dtrain::dist::compression
