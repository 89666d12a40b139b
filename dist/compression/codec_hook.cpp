#include "dist/compression/codec_hook.h"

#include "common/log.h"

#include <cmath>

namespace dtrain::dist::compression {

namespace {

// Bytes each rank sends under the ring algorithms (dist/step_comm.h).
double sent_per_rank(Collective collective, int64_t payload, int ranks) {
  const double n = ranks;
  const double bytes = static_cast<double>(payload);
  if (collective == Collective::kAllReduce) return 2.0 * (n - 1.0) / n * bytes;
  return (n - 1.0) / n * bytes;
}

double total_ms(const std::vector<Interval>& intervals) {
  double ms = 0.0;
  for (const auto& [start, end] : intervals) ms += measured_ms(*start, *end);
  return ms;
}

}  // namespace

CodecHook::CodecHook(CommHook& plain, std::unique_ptr<Codec> codec,
                     std::shared_ptr<Communicator> comm, int64_t warmup_steps,
                     Destination destination)
    : plain_(plain), codec_(std::move(codec)), comm_(std::move(comm)),
      warmup_steps_(warmup_steps), destination_(std::move(destination)) {
  if (!destination_) destination_ = [](const Bucket& bucket) { return bucket.flat; };
  // The config cannot tell (mpirun sets the world); dist.strategy = "single" is its warning.
  if (comm_->size() == 1) {
    log::warn("dist.compression.kind = \"{}\" on 1 rank: nothing is exchanged, so the codec "
              "saves no bytes and still loses information; use kind = \"none\" or more ranks",
              codec_->kind());
  }
}

std::unique_ptr<Work> CodecHook::launch(Bucket& bucket) {
  const double raw =
      sent_per_rank(plain_.collective(), plain_.payload_bytes(bucket), comm_->size());
  current_.raw_bytes += raw;
  if (!compressing()) {
    current_.wire_bytes += raw;
    return plain_.launch(bucket);
  }
  std::shared_ptr<const TimePoint> start = comm_->now();
  std::unique_ptr<Work> work = codec_->launch(bucket, step_ - warmup_steps_);
  current_.encode.emplace_back(std::move(start), comm_->now());
  return work;
}

void CodecHook::finish(Bucket& bucket) {
  if (!compressing()) {
    plain_.finish(bucket);
    return;
  }
  std::shared_ptr<const TimePoint> start = comm_->now();
  codec_->finish(bucket, destination_(bucket));
  current_.decode.emplace_back(std::move(start), comm_->now());
  current_.wire_bytes +=
      sent_per_rank(codec_->collective(), codec_->payload_bytes(bucket), comm_->size());
}

Collective CodecHook::collective() const {
  return compressing() ? codec_->collective() : plain_.collective();
}

int64_t CodecHook::payload_bytes(const Bucket& bucket) const {
  return compressing() ? codec_->payload_bytes(bucket) : plain_.payload_bytes(bucket);
}

void CodecHook::end_step(const std::vector<Bucket>& buckets) {
  codec_->relayout(buckets);
  last_ = std::move(current_);
  current_ = Record();
}

Stats CodecHook::stats() const {
  double residual_sq = 0.0;
  for (const torch::Tensor& residual : codec_->residuals()) {
    residual_sq += residual.pow(2).sum().item<double>();
  }
  // One rank alone sends nothing either way.
  const double ratio = last_.wire_bytes > 0 ? last_.raw_bytes / last_.wire_bytes : 1.0;
  return {{"comm/compression_ratio", ratio},
          {"comm/encode_ms", total_ms(last_.encode)},
          {"comm/decode_ms", total_ms(last_.decode)},
          {"comm/residual_norm", std::sqrt(residual_sq)},
          {"memory/codec_state_mb", static_cast<double>(codec_->state_bytes()) / (1 << 20)}};
}

}  // namespace dtrain::dist::compression
