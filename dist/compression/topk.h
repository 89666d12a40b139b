// Top-k sparsification (Deep Gradient Compression, Lin et al. 2018): each rank sends the k
// elements of largest magnitude of gradient + residual, as (values, int32 indices). With
// `momentum` (DGC's momentum correction) the velocity u = m u + g is accumulated into the
// residual instead of g, and both forget what was sent (momentum factor masking). With
// `sparsity_warmup_steps`, the fraction sent falls exponentially from 25% to `ratio`.
#pragma once

#include "dist/compression/gathered.h"

namespace dtrain::dist::compression {

// Elements sent of a bucket of `numel` at `step` of the codec.
int64_t topk_count(int64_t numel, double ratio, int64_t step, int64_t warmup_steps);
// The codec's per-bucket state: none without error feedback, else the residual, then DGC's
// velocity with `momentum`.
std::vector<std::string> topk_slots(const CompressionOptions& options);

// The primitives on a flat tensor, which the parameter server's messages use too
// (dist/ps/push_codec.h). Message: the `k` elements of `input` of largest magnitude (the
// input's dtype), then their k int32 indices, as bytes.
torch::Tensor topk_encode(const torch::Tensor& input, int64_t k);
// Elements `range` of the sum of the decoded `messages` [ranks, message bytes]: [range.numel]
// like `like`.
torch::Tensor topk_decode_sum(const torch::Tensor& messages, Range range,
                              const torch::Tensor& like);

class TopkCodec : public GatheredCodec {
 public:
  TopkCodec(const CompressionOptions& options, std::shared_ptr<Communicator> comm, Share share,
            std::vector<int64_t> numels);
  std::string kind() const override { return "topk"; }
  std::unique_ptr<Work> launch(Bucket& bucket, int64_t step) override;

  // Message: k values (the input's dtype), then k int32 indices.
  torch::Tensor encode(const torch::Tensor& input, int64_t step) const override;
  torch::Tensor decode_sum(const torch::Tensor& messages, int64_t numel, Range range,
                           const torch::Tensor& like) const override;

 private:
  double ratio_;
  double momentum_;
  int64_t warmup_steps_;
};

}  // namespace dtrain::dist::compression
