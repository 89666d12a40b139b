// One-bit compression with error feedback (Seide et al. 2014; the scaled sign of Karimireddy
// et al. 2019): the input is cut into chunks of `chunk` elements (the last padded with
// zeros); each chunk sends its mean magnitude as scale and one sign bit per element, packed 8
// to a byte, and decodes to scale x sign. The mean magnitude is the scale that minimises the
// squared error of scale x sign(x). A bucket smaller than `chunk` is one chunk of its own size
// (rounded up to whole bytes of signs): a chunk is never padded past its bucket.
#pragma once

#include "dist/compression/gathered.h"

namespace dtrain::dist::compression {

class OnebitCodec : public GatheredCodec {
 public:
  OnebitCodec(const CompressionOptions& options, std::shared_ptr<Communicator> comm, Share share,
              std::vector<int64_t> numels);
  std::string kind() const override { return "onebit"; }

  // Message: one scale per chunk (the input's dtype), then the packed signs (bit set: >= 0).
  torch::Tensor encode(const torch::Tensor& input, int64_t step) const override;
  // Decodes only the chunks that cover `range`.
  torch::Tensor decode_sum(const torch::Tensor& messages, int64_t numel, Range range,
                           const torch::Tensor& like) const override;

 private:
  int64_t chunk_;
};

// The chunk OnebitCodec uses for an input of `numel` elements: `chunk`, or fewer where the
// input is smaller, `numel` rounded up to a multiple of 8 (at least 8).
int64_t onebit_chunk(int64_t numel, int64_t chunk);

// The primitives on a flat tensor, which the parameter server's messages use too
// (dist/ps/push_codec.h). Message: one scale per `chunk` elements (the input's dtype), then
// the packed signs (bit set: >= 0), as bytes.
torch::Tensor onebit_encode(const torch::Tensor& input, int64_t chunk);
// Elements `range` of the sum of the decoded `messages` [ranks, message bytes], each encoding
// an input of `numel` elements: [range.numel] like `like`. Decodes only the chunks that cover
// `range`.
torch::Tensor onebit_decode_sum(const torch::Tensor& messages, int64_t numel, Range range,
                                const torch::Tensor& like, int64_t chunk);

// The signs of `input` (numel a multiple of 8), packed: bit b of byte i set where element
// 8i + b >= 0 (as -0.0 is).
torch::Tensor pack_signs(const torch::Tensor& input);

}  // namespace dtrain::dist::compression
