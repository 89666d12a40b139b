// fp16 and bf16 casts, all-reduced in the narrow type (reduce-scattered where each rank keeps
// a shard: the message is laid out like the bucket): half the bytes of float32. Before the
// cast every rank multiplies its bucket by the same power of two s, chosen from the sum over
// ranks of each rank's largest magnitude A: s = 2^floor(log2(2^15 / A)), so that every partial
// sum of the all-reduce stays below 2^15 (fp16's largest is 65504) and small gradients are
// lifted out of fp16's subnormals. A is a one-element all-reduce before the cast; on NCCL it
// is ordered on the streams and the host does not wait. Decoding divides by s x ranks. A
// non-finite A leaves s = 1, so that overflow checks downstream still see the Inf or NaN.
// Under the parameter server (`Roots`) the message is not all-reduced: each range of it is
// reduced onto the rank that serves it, half an all-reduce's bytes, and a rank decodes only
// the ranges it serves.
#pragma once

#include "dist/compression/codec.h"

#include <functional>

namespace dtrain::dist::compression {

// The scale of a bucket whose ranks' largest magnitudes sum to `magnitude` (a one-element
// tensor): a power of two, on the tensor's device.
torch::Tensor cast_scale(const torch::Tensor& magnitude);

class CastCodec : public Codec {
 public:
  // With `roots`, each bucket's ranges are reduced onto their roots (Share::kWhole: `kept` in
  // finish() is the bucket, written only in the ranges this rank is the root of).
  CastCodec(torch::ScalarType type, std::shared_ptr<Communicator> comm, Share share,
            std::vector<int64_t> numels, Roots roots = nullptr);
  std::string kind() const override { return type_ == torch::kHalf ? "fp16" : "bf16"; }
  Collective collective() const override {
    if (roots_) return Collective::kReduce;
    return share_ == Share::kWhole ? Collective::kAllReduce : Collective::kReduceScatter;
  }
  std::unique_ptr<Work> launch(Bucket& bucket, int64_t step) override;
  void finish(Bucket& bucket, torch::Tensor kept) override;
  int64_t payload_bytes(const Bucket& bucket) const override;

 private:
  struct InFlight {
    torch::Tensor message;  // [numel] of type_
    torch::Tensor summed;   // [kept numel] of type_: the message itself under Share::kWhole
    torch::Tensor scale;    // [1]
  };
  torch::ScalarType type_;
  Roots roots_;
  std::vector<InFlight> in_flight_;  // by bucket
};

}  // namespace dtrain::dist::compression
