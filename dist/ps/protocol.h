// The parameter server's messages: MPI point-to-point on a communicator of all ranks, host
// tensors. Messages between one worker and one server under one tag arrive in the order they
// were sent (MPI's non-overtaking rule), so pushes and parameter messages need no sequence
// numbers: the k-th push of a chunk is the worker's k-th step.
//   worker -> server  push_tag(c)    chunk c's gradient, [numel]; with dist.compression an
//                                    encoded push instead (PushHeader below, then its payload)
//   worker -> server  kControlTag    a Control, float64 [3]
//   server -> worker  params_tag(c)  chunk c's parameters after `version` updates, or
//                                    a round in progress, [header + numel] (write_version)
//   both ways         kStateTag      bytes: optimizer state for checkpoints and resumes
//   worker -> server 0  kMembershipTag  float64 [n]: a roll call, carrying this worker's
//                                       part of a sum over the workers (dist/ps/live_workers.h)
//   server 0 -> worker  kMembershipTag  float64 [workers + n]: the answer: 1 for each worker
//                                       still training, then the sum of their parts
//   server 0 -> server  kMembershipTag  a Control kWorkerLost: drop that worker
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <cstring>

namespace dtrain::dist::ps {

constexpr int kControlTag = 0;
constexpr int kStateTag = 1;
constexpr int kMembershipTag = 2;
constexpr int kFirstChunkTag = 3;
inline int push_tag(int64_t chunk) { return static_cast<int>(kFirstChunkTag + 2 * chunk); }
inline int params_tag(int64_t chunk) { return static_cast<int>(kFirstChunkTag + 1 + 2 * chunk); }
// The chunk of a push's tag.
inline int64_t pushed_chunk(int tag) { return (tag - kFirstChunkTag) / 2; }
inline bool is_push_tag(int tag) { return tag >= kFirstChunkTag && (tag - kFirstChunkTag) % 2 == 0; }

enum class Command : int64_t {
  kStep = 1,    // the worker's pushes of step `clock` are complete; apply them at lr `value`
  kPull = 2,    // send me every chunk you hold, as it is now
  kSendState = 3,  // send me your optimizer state (kStateTag)
  kLoadState = 4,  // your parameters and optimizer state follow (kStateTag); acknowledge
  kDone = 5,       // this worker has finished
  kWorkerLost = 6,  // server 0 to the other servers: worker `clock` is gone
};

struct Control {
  Command command = Command::kStep;
  int64_t clock = 0;
  double value = 0.0;

  torch::Tensor encode() const {
    return torch::tensor({static_cast<double>(command), static_cast<double>(clock), value},
                         torch::kFloat64);
  }
  static Control decode(const torch::Tensor& message) {
    const double* v = message.data_ptr<double>();
    return {static_cast<Command>(static_cast<int64_t>(v[0])), static_cast<int64_t>(v[1]), v[2]};
  }
};

// An encoded push (dist.compression, dist/ps/push_codec.h), uint8, self-describing: the
// server needs only the chunk's numel and the parameters' dtype (both from the plan) beside it.
//   bytes [0, 8)    int64 encoding (Encoding below)
//   bytes [8, 16)   int64 parameter: topk k, onebit the elements per scale, otherwise 0
//   bytes [16, ...) payload, values in the parameters' dtype:
//     kDense   numel values (warm-up steps)
//     kFp16,   the scale s (one value), then numel 2-byte values: the chunk x s, cast
//     kBf16    (s = 2^floor(log2(2^15 / largest magnitude)), dist/compression/cast.h)
//     kTopk    k values, then their k int32 indices in the chunk
//     kOnebit  ceil(numel / parameter) scales, then the signs (bit set: >= 0), 8 to a byte,
//              of the chunk padded to a whole number of scales
// Sixteen header bytes keep the payload aligned to 8.
enum class Encoding : int64_t { kDense = 0, kFp16 = 1, kBf16 = 2, kTopk = 3, kOnebit = 4 };
struct PushHeader {
  Encoding encoding = Encoding::kDense;
  int64_t parameter = 0;
};
constexpr int64_t kPushHeaderBytes = 16;
static_assert(sizeof(PushHeader) == kPushHeaderBytes);

// A parameter message starts with the chunk's version (updates applied to it), an int64 in
// the first 8 bytes of the tensor, whatever its floating dtype. A partial round (ssp_reads =
// "partial": version v, and round v stepped with the pushes in so far) is written as -v - 1.
inline int64_t header_numel(torch::ScalarType dtype) {
  return 8 / static_cast<int64_t>(c10::elementSize(dtype));
}
inline void write_version(torch::Tensor& message, int64_t version, bool partial = false) {
  const int64_t header = partial ? -version - 1 : version;
  std::memcpy(message.data_ptr(), &header, sizeof(header));
}
inline int64_t read_header(const torch::Tensor& message) {
  int64_t header = 0;
  std::memcpy(&header, message.data_ptr(), sizeof(header));
  return header;
}
inline int64_t read_version(const torch::Tensor& message) {
  const int64_t header = read_header(message);
  return header < 0 ? -header - 1 : header;
}
inline bool is_partial(const torch::Tensor& message) { return read_header(message) < 0; }

}  // namespace dtrain::dist::ps
