// The codecs whose messages do not add up (top-k, signs): each rank encodes its bucket into a
// byte message of a size every rank knows, the messages are all-gathered, and every rank
// decodes all of them over the part of the bucket it keeps (under ZeRO-2 its shard: top-k's
// indices that fall into it, the sign chunks that cover it) and averages. Error feedback:
// residual = (gradient + residual) - what this rank's own message decodes to, over the whole
// bucket but its padding (ZeRO-2's), where a sign still decodes to its chunk's scale and
// nothing may be kept (a checkpoint keeps residuals by parameter).
#pragma once

#include "dist/compression/codec.h"

namespace dtrain::dist::compression {

class GatheredCodec : public Codec {
 public:
  Collective collective() const override { return Collective::kAllGather; }
  std::unique_ptr<Work> launch(Bucket& bucket, int64_t step) override;
  void finish(Bucket& bucket, torch::Tensor kept) override;
  int64_t payload_bytes(const Bucket& bucket) const override {
    return gathered_.at(bucket.index).numel();
  }

  // `input` (flat) as a uint8 message, at `step` from the codec's first.
  virtual torch::Tensor encode(const torch::Tensor& input, int64_t step) const = 0;
  // Elements `range` of the sum of the decoded `messages` [ranks, message bytes], each
  // encoding an input of `numel` elements: [range.numel] like `like`.
  virtual torch::Tensor decode_sum(const torch::Tensor& messages, int64_t numel, Range range,
                                   const torch::Tensor& like) const = 0;

 protected:
  // `slots`: empty without error feedback, else the residual first.
  GatheredCodec(std::shared_ptr<Communicator> comm, Share share, std::vector<std::string> slots,
                std::vector<int64_t> numels)
      : Codec(std::move(comm), share, slots, std::move(numels)), error_feedback_(!slots.empty()) {}

  bool error_feedback_;

 private:
  std::vector<torch::Tensor> gathered_;  // by bucket: [ranks * message bytes]
};

// Byte views of a message's parts: `tensor` (contiguous) as bytes, and bytes [rows, n] as
// rows of `dtype` (a copy).
torch::Tensor to_bytes(const torch::Tensor& tensor);
torch::Tensor from_bytes(const torch::Tensor& bytes, torch::ScalarType dtype);

}  // namespace dtrain::dist::compression
