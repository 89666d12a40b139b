// The codecs whose messages do not add up (top-k, signs): each rank encodes its bucket into a
// byte message of a size every rank knows, the messages are all-gathered, and every rank
// decodes all of them and averages. Error feedback: residual = (gradient + residual) - what
// this rank's own message decodes to.
#pragma once

#include "dist/compression/codec.h"

namespace dtrain::dist::compression {

class GatheredCodec : public Codec {
 public:
  Collective collective() const override { return Collective::kAllGather; }
  std::unique_ptr<Work> launch(Bucket& bucket, int64_t step) override;
  void finish(Bucket& bucket) override;
  int64_t payload_bytes(const Bucket& bucket) const override {
    return gathered_.at(bucket.index).numel();
  }

  // `input` (flat) as a uint8 message, at `step` from the codec's first.
  virtual torch::Tensor encode(const torch::Tensor& input, int64_t step) const = 0;
  // The sum of the decoded `messages` [ranks, message bytes], [numel] like `like`.
  virtual torch::Tensor decode_sum(const torch::Tensor& messages, int64_t numel,
                                   const torch::Tensor& like) const = 0;

 protected:
  // `slots`: empty without error feedback, else the residual first.
  GatheredCodec(std::shared_ptr<Communicator> comm, std::vector<std::string> slots,
                std::vector<int64_t> numels)
      : Codec(slots, std::move(numels)), comm_(std::move(comm)), error_feedback_(!slots.empty()) {}

  std::shared_ptr<Communicator> comm_;
  bool error_feedback_;

 private:
  std::vector<torch::Tensor> gathered_;  // by bucket: [ranks * message bytes]
};

// Byte views of a message's parts: `tensor` (contiguous) as bytes, and bytes [rows, n] as
// rows of `dtype` (a copy).
torch::Tensor to_bytes(const torch::Tensor& tensor);
torch::Tensor from_bytes(const torch::Tensor& bytes, torch::ScalarType dtype);

}  // namespace dtrain::dist::compression
