// Compressed pushes over the parameter server's messages transport (dist.compression with
// placement "dedicated", consistency "async" or a hierarchy): a worker encodes each chunk it
// pushes on its own, into a message that says how it is encoded (dist/ps/protocol.h), and
// the chunk's server decodes it into the dense gradient it then applies as it applies an
// uncompressed push (bsp and ssp: summed over the workers; async: on arrival).
//   fp16, bf16  the chunk scaled by a power of two from this worker's largest magnitude in it
//               (dist/compression/cast.h's cast_scale), cast; no residual, as under DDP
//   topk        the chunk's ceil(ratio x numel) largest magnitudes with their indices, with
//               DGC's sparsity warm-up and momentum correction as under DDP
//               (dist/compression/topk.h)
//   onebit      a mean magnitude per `chunk` elements of the pushed chunk, and packed signs
//               (dist/compression/onebit.h)
// The codecs' own primitives encode and decode, on the flat chunk. Error feedback is per
// worker (per node leader with a hierarchy), over the chunks it pushed: each bucket's
// residual is gradient + residual less what this worker's messages decode to, so that over T
// steps sent_1 + ... + sent_T + residual_T = g_1 + ... + g_T (dist/compression/codec.h).
// For the first dist.compression.warmup_steps trainer steps the pushes are dense (encoding
// kDense). The state is checkpointed by parameter, as the collective codecs' is
// (dist/compression/codec_file.h: codec_rank{W}.pt for worker W).
// PowerSGD has no messages form here: its power iteration all-reduces its factors across the
// workers (dist/options.cpp refuses it).
#pragma once

#include "dist/compression/bucket_state.h"
#include "dist/compression/codec.h"
#include "dist/options.h"
#include "dist/ps/protocol.h"
#include "dist/reducer.h"
#include "dist/strategy.h"

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::dist::ps {

class PushEncoder {
 public:
  // `numels`: the trainable parameters' element counts, by index.
  PushEncoder(const CompressionOptions& options, std::vector<int64_t> numels);

  const std::string& kind() const { return options_.kind; }
  // The messages of bucket `bucket` (laid out as `layout`) whose gradients are `flat` (any
  // device; read, not written), one per range of `chunks`, at trainer step `step`: uint8 on
  // the host. Blocking: the messages are copied to the host before it returns.
  std::vector<torch::Tensor> encode(int64_t bucket, const BucketLayout& layout,
                                    const torch::Tensor& flat,
                                    const std::vector<compression::Range>& chunks, int64_t step);
  // The step ended: its figures become stats()'.
  void end_step();
  // comm/compression_ratio (the pushes' uncompressed bytes over the bytes sent, headers
  // included), comm/encode_ms, comm/residual_norm, memory/codec_state_mb of the last step.
  Stats stats() const;

  // Error-feedback residuals by bucket (none without), and the state for checkpoints.
  std::vector<torch::Tensor> residuals() const { return state_.all(0); }
  const std::vector<std::string>& slots() const { return state_.slots(); }
  compression::CodecState state() const { return {state_.by_param(), {}}; }
  void set_state(compression::CodecState state) { state_.set_by_param(std::move(state.slots)); }

 private:
  struct Record {
    double raw_bytes = 0.0;
    double wire_bytes = 0.0;
    double encode_ms = 0.0;
  };
  // The header and the payload of `input` at codec step `codec_step` (on input's device).
  PushHeader header(int64_t numel, int64_t codec_step) const;
  torch::Tensor payload(const torch::Tensor& input, const PushHeader& header) const;

  CompressionOptions options_;
  compression::BucketState state_;
  Record current_, last_;
};

// The dense gradient that push `message` (protocol.h's layout, on the host) carries, into
// `dense` [the chunk's numel] (on the host, the parameters' dtype).
void decode_push(const torch::Tensor& message, torch::Tensor& dense);

// The payload that `header` describes decoded into a tensor like `like` ([numel], any
// device): what the worker's residual subtracts, and what the server applies.
torch::Tensor decode_payload(const PushHeader& header, const torch::Tensor& payload,
                             const torch::Tensor& like);

}  // namespace dtrain::dist::ps
