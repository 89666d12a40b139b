// The reducer's hook under a codec (DESIGN.md: a codec wraps another hook and keeps
// per-bucket state): for the first `warmup_steps` steps each bucket goes to the wrapped hook
// (the strategy's plain exchange: DDP's all-reduce, ZeRO-2's reduce-scatter), then to the
// codec, which decodes into what the strategy keeps of the bucket (`destination`). It times
// encoding (the codec's launch) and decoding (its finish) on the communicator's clock, and
// reports for the last completed step
//   comm/compression_ratio  bytes on the wire per rank of the wrapped hook's uncompressed
//                           collective over those of the codec's (all-reduce 2(n-1)/n x
//                           payload, reduce-scatter (n-1)/n x input, all-gather (n-1)/n x
//                           output): gathered codecs lose ratio with n, and more under ZeRO-2,
//                           whose uncompressed reduce-scatter sends half an all-reduce
//   comm/encode_ms, comm/decode_ms   summed over the buckets
//   comm/residual_norm      L2 norm of this rank's error-feedback residuals
//   memory/codec_state_mb   what the codec keeps between steps on this rank
#pragma once

#include "dist/compression/codec.h"

#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace dtrain::dist::compression {

// From start to end on the communicator's clock.
using Interval = std::pair<std::shared_ptr<const TimePoint>, std::shared_ptr<const TimePoint>>;

// Where a bucket's kept part of the average goes (DDP: bucket.flat; ZeRO-2: its shard).
using Destination = std::function<torch::Tensor(const Bucket& bucket)>;

class CodecHook : public CommHook {
 public:
  // Without a `destination`, the bucket itself (the codec keeping Share::kWhole).
  CodecHook(CommHook& plain, std::unique_ptr<Codec> codec, std::shared_ptr<Communicator> comm,
            int64_t warmup_steps, Destination destination = nullptr);

  // The trainer's step about to run: warm-up and the codecs' schedules count from it, so they
  // survive a resume without state of their own.
  void begin_step(int64_t step) { step_ = step; }
  std::unique_ptr<Work> launch(Bucket& bucket) override;
  void finish(Bucket& bucket) override;
  Collective collective() const override;
  int64_t payload_bytes(const Bucket& bucket) const override;
  // After the optimizer step: the codec's state follows a re-plan of `buckets`, and the
  // step's figures become stats()'.
  void end_step(const std::vector<Bucket>& buckets);
  Stats stats() const;

  Codec& codec() { return *codec_; }
  const Codec& codec() const { return *codec_; }
  // This step's buckets go through the codec (warm-up is over).
  bool compressing() const { return step_ >= warmup_steps_; }

 private:
  struct Record {
    double raw_bytes = 0.0;   // what the wrapped hook would send, per rank
    double wire_bytes = 0.0;  // what was sent, per rank
    std::vector<Interval> encode, decode;
  };

  CommHook& plain_;
  std::unique_ptr<Codec> codec_;
  std::shared_ptr<Communicator> comm_;
  int64_t warmup_steps_;
  Destination destination_;
  int64_t step_ = 0;
  Record current_, last_;
};

}  // namespace dtrain::dist::compression
