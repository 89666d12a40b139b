#include "dist/compression/cast.h"

#include <cmath>

namespace dtrain::dist::compression {

namespace {

constexpr double kSumBound = 32768.0;  // 2^15: partial sums stay below fp16's 65504
constexpr double kMaxScale = 0x1p60;   // all-zero buckets: any finite scale will do

}  // namespace

torch::Tensor cast_scale(const torch::Tensor& magnitude) {
  const torch::Tensor scale =
      torch::exp2(torch::floor(torch::log2(kSumBound / magnitude))).clamp_max_(kMaxScale);
  return torch::where(torch::isfinite(magnitude), scale, torch::ones_like(scale));
}

CastCodec::CastCodec(torch::ScalarType type, std::shared_ptr<Communicator> comm, Share share,
                     std::vector<int64_t> numels)
    : Codec(std::move(comm), share, {}, std::move(numels)), type_(type) {}

std::unique_ptr<Work> CastCodec::launch(Bucket& bucket, int64_t step) {
  (void)step;
  if (static_cast<int64_t>(in_flight_.size()) <= bucket.index) in_flight_.resize(bucket.index + 1);
  InFlight& flight = in_flight_[bucket.index];
  torch::Tensor magnitude = bucket.flat.abs().max().reshape({1});
  comm_->all_reduce(magnitude, ReduceOp::kSum)->wait();
  flight.scale = cast_scale(magnitude);
  flight.message = bucket.flat.mul(flight.scale).to(type_);
  if (share_ == Share::kWhole) {
    flight.summed = flight.message;
    return comm_->all_reduce(flight.message, ReduceOp::kSum);
  }
  flight.summed = torch::empty({kept(bucket).numel}, flight.message.options());
  return comm_->reduce_scatter(flight.message, flight.summed, ReduceOp::kSum);
}

void CastCodec::finish(Bucket& bucket, torch::Tensor kept) {
  InFlight& flight = in_flight_.at(bucket.index);
  kept.copy_(flight.summed);
  kept.div_(flight.scale * static_cast<double>(comm_->size()));
}

int64_t CastCodec::payload_bytes(const Bucket& bucket) const {
  return in_flight_.at(bucket.index).message.numel() * 2;
}

}  // namespace dtrain::dist::compression
