// The reducer's hook under a codec (DESIGN.md: a codec wraps another hook and keeps
// per-bucket state): for the first `warmup_steps` steps each bucket goes to the wrapped hook
// (the plain all-reduce), then to the codec. It times encoding (the codec's launch) and
// decoding (its finish) on the communicator's clock, and reports for the last completed step
//   comm/compression_ratio  bytes on the wire per rank of an uncompressed all-reduce over
//                           those of the codec's collectives (all-reduce 2(n-1)/n x payload,
//                           all-gather (n-1)/n x output): gathered codecs lose ratio with n
//   comm/encode_ms, comm/decode_ms   summed over the buckets
//   comm/residual_norm      L2 norm of this rank's error-feedback residuals
//   memory/codec_state_mb   what the codec keeps between steps on this rank
#pragma once

#include "dist/compression/codec.h"

#include <memory>
#include <utility>
#include <vector>

namespace dtrain::dist::compression {

// From start to end on the communicator's clock.
using Interval = std::pair<std::shared_ptr<const TimePoint>, std::shared_ptr<const TimePoint>>;

class CodecHook : public CommHook {
 public:
  CodecHook(CommHook& plain, std::unique_ptr<Codec> codec, std::shared_ptr<Communicator> comm,
            int64_t warmup_steps);

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

 private:
  bool compressing() const { return step_ >= warmup_steps_; }
  struct Record {
    double raw_bytes = 0.0;   // what an uncompressed all-reduce would send, per rank
    double wire_bytes = 0.0;  // what was sent, per rank
    std::vector<Interval> encode, decode;
  };

  CommHook& plain_;
  std::unique_ptr<Codec> codec_;
  std::shared_ptr<Communicator> comm_;
  int64_t warmup_steps_;
  int64_t step_ = 0;
  Record current_, last_;
};

}  // namespace dtrain::dist::compression
