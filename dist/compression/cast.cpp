#include "dist/compression/cast.h"

#include <cmath>

namespace dtrain::dist::compression {

namespace {

constexpr double kSumBound = 32768.0;  // 2^15: partial sums stay below fp16's 65504
constexpr double kMaxScale = 0x1p60;   // all-zero buckets: any finite scale will do

// The reduces of a bucket's ranges onto their roots, as one Work.
class ReducesWork : public Work {
 public:
  explicit ReducesWork(std::vector<std::unique_ptr<Work>> works) : works_(std::move(works)) {}
  void wait() override {
    for (auto& work : works_) work->wait();
  }
  bool test() override {
    bool done = true;
    for (auto& work : works_) done = work->test() && done;  // drives every one
    return done;
  }
  std::shared_ptr<const TimePoint> started() const override { return works_.front()->started(); }
  std::shared_ptr<const TimePoint> finished() const override {
    return works_.back()->finished();
  }
  int source() const override { return -1; }

 private:
  std::vector<std::unique_ptr<Work>> works_;
};

}  // namespace

torch::Tensor cast_scale(const torch::Tensor& magnitude) {
  const torch::Tensor scale =
      torch::exp2(torch::floor(torch::log2(kSumBound / magnitude))).clamp_max_(kMaxScale);
  return torch::where(torch::isfinite(magnitude), scale, torch::ones_like(scale));
}

CastCodec::CastCodec(torch::ScalarType type, std::shared_ptr<Communicator> comm, Share share,
                     std::vector<int64_t> numels, Roots roots)
    : Codec(std::move(comm), share, {}, std::move(numels)),
      type_(type),
      roots_(std::move(roots)) {}

std::unique_ptr<Work> CastCodec::launch(Bucket& bucket, int64_t step) {
  (void)step;
  if (static_cast<int64_t>(in_flight_.size()) <= bucket.index) in_flight_.resize(bucket.index + 1);
  InFlight& flight = in_flight_[bucket.index];
  torch::Tensor magnitude = bucket.flat.abs().max().reshape({1});
  comm_->all_reduce(magnitude, ReduceOp::kSum)->wait();
  flight.scale = cast_scale(magnitude);
  flight.message = bucket.flat.mul(flight.scale).to(type_);
  if (roots_) {
    flight.summed = flight.message;
    std::vector<std::unique_ptr<Work>> reduces;
    for (const Root& root : roots_(bucket)) {
      reduces.push_back(comm_->reduce(flight.message.narrow(0, root.range.offset, root.range.numel),
                                      root.rank, ReduceOp::kSum));
    }
    return std::make_unique<ReducesWork>(std::move(reduces));
  }
  if (share_ == Share::kWhole) {
    flight.summed = flight.message;
    return comm_->all_reduce(flight.message, ReduceOp::kSum);
  }
  flight.summed = torch::empty({kept(bucket).numel}, flight.message.options());
  return comm_->reduce_scatter(flight.message, flight.summed, ReduceOp::kSum);
}

void CastCodec::finish(Bucket& bucket, torch::Tensor kept) {
  InFlight& flight = in_flight_.at(bucket.index);
  const torch::Tensor divisor = flight.scale * static_cast<double>(comm_->size());
  if (roots_) {  // only the sums this rank received
    for (const Root& root : roots_(bucket)) {
      if (root.rank != comm_->rank()) continue;
      torch::Tensor range = kept.narrow(0, root.range.offset, root.range.numel);
      range.copy_(flight.summed.narrow(0, root.range.offset, root.range.numel));
      range.div_(divisor);
    }
    return;
  }
  kept.copy_(flight.summed);
  kept.div_(divisor);
}

int64_t CastCodec::payload_bytes(const Bucket& bucket) const {
  return in_flight_.at(bucket.index).message.numel() * 2;
}

}  // namespace dtrain::dist::compression
