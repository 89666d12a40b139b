// Gradient codecs: how a bucket's gradient is encoded, exchanged and decoded so that every
// rank ends with its part (dist/compression/share.h: DDP the whole bucket, ZeRO-2 its shard)
// of the average over ranks of each rank's decoded message. Two families:
//   - summable messages (fp16/bf16 casts, PowerSGD's P and Q factors) are all-reduced, or
//     reduce-scattered where each rank keeps a shard and the message is laid out like the
//     bucket (the casts); PowerSGD all-reduces its small factors and rebuilds only the part
//     of P Q^T that the rank keeps;
//   - top-k and sign messages are not (their sum is no message of the same form): each
//     rank's message is all-gathered, then every one is decoded, over the kept part only, and
//     added up.
// Codecs that lose information keep an error-feedback residual per bucket: the part of
// gradient + residual their decoded message did not carry, added to the next step's
// gradient, so that over T steps  sent_1 + ... + sent_T + residual_T = g_1 + ... + g_T
// (Seide et al. 2014; Karimireddy et al. 2019). The residual covers the whole bucket under
// either share: it is what this rank's message did not carry of this rank's gradient. The
// codecs know buckets and shares, not strategies: DDP and ZeRO-2 call them from the
// reducer's hook (dist/compression/codec_hook.h).
#pragma once

#include "dist/compression/bucket_state.h"
#include "dist/compression/share.h"
#include "dist/comm/communicator.h"
#include "dist/options.h"
#include "dist/reducer.h"
#include "dist/step_comm.h"

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist::compression {

// A codec's state for a checkpoint: its bucket slots by parameter, and tensors of its own
// (PowerSGD's Q by parameter) that are the same on every rank.
struct CodecState {
  std::vector<ByParam> slots;  // in the order of BucketState::slots()
  ByParam shared;
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual std::string kind() const = 0;
  // The collective that carries the messages (all-reduce, reduce-scatter or all-gather).
  virtual Collective collective() const = 0;
  // Encodes bucket.flat (plus its residual) and starts the exchange, at `step` counted from
  // the codec's first step. In flight until the Work's wait(); called on every rank for the
  // same buckets in the same order (the reducer's contract).
  virtual std::unique_ptr<Work> launch(Bucket& bucket, int64_t step) = 0;
  // After the wait: `kept` [kept(bucket).numel] becomes this rank's part of the average over
  // ranks of the decoded messages (under Share::kWhole it may be bucket.flat itself).
  virtual void finish(Bucket& bucket, torch::Tensor kept) = 0;
  // The elements of `bucket` that this rank keeps.
  Range kept(const Bucket& bucket) const {
    return kept_range(share_, bucket.flat.numel(), comm_->rank(), comm_->size());
  }
  // The payload (nccl-tests' size: all-reduce the tensor, all-gather its output) of the
  // bucket's last exchange, in bytes.
  virtual int64_t payload_bytes(const Bucket& bucket) const = 0;

  // Error feedback and other state: the residuals (none without error feedback), the slots'
  // names, the checkpointed state, and moving the state after the reducer re-planned.
  std::vector<torch::Tensor> residuals() const { return state_.all(0); }
  const std::vector<std::string>& slots() const { return state_.slots(); }
  virtual CodecState state() const { return {state_.by_param(), {}}; }
  // Bytes of state kept between steps (residuals, momentum, PowerSGD's Q).
  virtual int64_t state_bytes() const { return state_.bytes(); }
  virtual void set_state(CodecState state) { state_.set_by_param(std::move(state.slots)); }
  void relayout(const std::vector<Bucket>& buckets) { state_.relayout(buckets); }

 protected:
  // `slots`: the per-bucket state, the residual first; `numels`: elements per parameter.
  Codec(std::shared_ptr<Communicator> comm, Share share, std::vector<std::string> slots,
        std::vector<int64_t> numels)
      : comm_(std::move(comm)), share_(share), state_(std::move(slots), std::move(numels)) {}
  std::shared_ptr<Communicator> comm_;
  Share share_;
  BucketState state_;
};

// Under the parameter server: the ranges of a bucket (its chunks), each with the rank that
// serves it.
struct Root {
  Range range;
  int rank = 0;
};
using Roots = std::function<std::vector<Root>(const Bucket& bucket)>;

// The codec `options` name, exchanging over `comm`, each rank keeping `share` of every
// bucket; `params`: the model's trainable parameters in the reducer's order (their shapes
// decide what PowerSGD compresses). With `roots`, the casts reduce each range onto its root
// instead of all-reducing (dist/compression/cast.h); the other codecs ignore them.
std::unique_ptr<Codec> make_codec(const CompressionOptions& options,
                                  std::shared_ptr<Communicator> comm,
                                  const std::vector<torch::Tensor>& params,
                                  Share share = Share::kWhole, Roots roots = nullptr);

}  // namespace dtrain::dist::compression
