// How the parameter server splits a model (Li et al. 2014; placement as BytePS learned it):
// the trainable parameters, in the order backward produces their gradients, fill buckets of
// about one chunk each (whole tensors); each bucket is cut into chunks of at most
// `chunk_numel` elements, so a large tensor spans several chunks. Chunks are placed on the
// servers by bytes, largest first onto the least loaded server (LPT), ties to the lower
// index: deterministic, and within one largest chunk of perfect balance. Round-robin or
// hashed placement is what left one server of TensorFlow's and BytePS's with most of the
// load. With `keep_tensors_whole`, the chunks that share a tensor go to one server together
// (async training: each server then computes whole-tensor norms alone).
#pragma once

#include "dist/reducer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::dist {

struct PsChunk {
  int64_t bucket = 0;  // the worker's gradient bucket it is cut from
  int64_t offset = 0;  // element offset in that bucket
  int64_t numel = 0;
  int server = 0;
};

// Where a chunk and a parameter overlap: elements [param_offset, param_offset + numel) of
// the parameter (in memory order) are elements [chunk_offset, ...) of the chunk.
struct PsPiece {
  int64_t param = 0;
  int64_t chunk = 0;
  int64_t param_offset = 0;
  int64_t chunk_offset = 0;
  int64_t numel = 0;
};

struct PsPlan {
  Layout layout;                // the workers' gradient buckets, in launch order
  std::vector<PsChunk> chunks;  // by bucket, then offset; a chunk's id is its index
  std::vector<int64_t> first_chunk;  // bucket b holds chunks [first_chunk[b], first_chunk[b+1])
  std::vector<PsPiece> pieces;  // by chunk, then offset
  int servers = 1;

  // Chunk ids placed on `server`, ascending.
  std::vector<int64_t> chunks_of(int server) const;
  // Elements placed on each server.
  std::vector<int64_t> server_numel() const;
  // The plan as printed at start and stored with checkpoints: a summary line, the load of
  // each server, and every chunk with the tensors it holds.
  std::string describe(const std::vector<std::string>& names, int64_t element_size) const;
  // describe() without the chunks: what the log shows at start.
  std::string summary(const std::vector<std::string>& names, int64_t element_size) const;
};

// Points `param` (the module's own tensor) at `flat`'s storage from `offset`, keeping its
// strides (elements in memory order, as its gradient lies in a bucket), its values copied.
void move_into_flat(torch::Tensor& param, const torch::Tensor& flat, int64_t offset);
// One flat tensor per bucket of `layout`, into which every parameter of the bucket is moved
// (move_into_flat): the parameters laid out as their gradients are.
std::vector<torch::Tensor> move_into_buckets(std::vector<torch::Tensor>& params,
                                             const Layout& layout);

// Appends chunk [offset, offset + numel) of bucket `bucket` (in plan.layout), placed on
// `server`, with its pieces. `numels`: the trainable parameters' element counts.
void add_chunk(PsPlan& plan, int64_t bucket, int64_t offset, int64_t numel, int server,
               const std::vector<int64_t>& numels);

// The most chunks a plan may have. Every chunk is a message (or a collective) of its own per
// worker and step, matched by its own tag: SimpleCNN's 0.5 MiB in 5,046 chunks trained 5x
// slower than in 502 on CPU ranks, and in 131,050 (dist.ps.chunk_mb = 1e-6) a 10-step run had
// not ended after 11 minutes. 4,096 also keeps the tags within the least MPI_TAG_UB MPI allows (32767).
constexpr int64_t kMaxPsChunks = 4096;

// Empty, or the warning for a plan whose chunks are too few or too large to spread over the
// servers evenly (the most loaded at 1.5x an even share or more): the busiest server sets
// every step's pace, the parameter server's most reported performance bug. Names a chunk_mb
// that spreads it.
std::string uneven_plan_warning(const PsPlan& plan, double chunk_mb, int64_t element_size);

// Elements of `element_size` bytes in a chunk of at most `chunk_mb` MiB (at least one).
int64_t ps_chunk_numel(double chunk_mb, int64_t element_size);
// Empty when `numels` (the trainable parameters' element counts) in chunks of `chunk_mb` MiB
// make at most kMaxPsChunks chunks; otherwise why not, naming dist.ps.chunk_mb and the least
// power-of-two multiple of it that fits.
std::string ps_chunking_problem(const std::vector<int64_t>& numels, int64_t element_size,
                                double chunk_mb);

// `numels`: the trainable parameters' element counts, in registration order.
PsPlan make_ps_plan(const std::vector<int64_t>& numels, int servers, int64_t chunk_numel,
                    bool keep_tensors_whole);
// The same for `params` (trainable, one dtype) in chunks of at most `chunk_mb` MiB; a
// UserError for more than kMaxPsChunks chunks.
PsPlan make_ps_plan(const std::vector<torch::Tensor>& params, int servers, double chunk_mb,
                    bool keep_tensors_whole);

// Bucket `bucket`'s index in plan.layout; a check failure for a bucket the plan does not know.
size_t plan_bucket(const PsPlan& plan, const Bucket& bucket);

}  // namespace dtrain::dist
