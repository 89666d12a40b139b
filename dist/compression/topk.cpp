#include "dist/compression/topk.h"

#include "common/error.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dtrain::dist::compression {

namespace {

constexpr double kWarmupStartRatio = 0.25;  // DGC: 75% sparsity in the first warm-up epoch

}  // namespace

std::vector<std::string> topk_slots(const CompressionOptions& options) {
  if (!options.error_feedback) return {};
  if (options.momentum > 0) return {"residual", "momentum"};
  return {"residual"};
}

int64_t topk_count(int64_t numel, double ratio, int64_t step, int64_t warmup_steps) {
  if (step < warmup_steps && ratio < kWarmupStartRatio) {
    const double progress = static_cast<double>(step) / static_cast<double>(warmup_steps);
    ratio = kWarmupStartRatio * std::pow(ratio / kWarmupStartRatio, progress);
  }
  const auto k = static_cast<int64_t>(std::ceil(ratio * static_cast<double>(numel)));
  return std::clamp<int64_t>(k, 1, numel);
}

TopkCodec::TopkCodec(const CompressionOptions& options, std::shared_ptr<Communicator> comm,
                     Share share, std::vector<int64_t> numels)
    : GatheredCodec(std::move(comm), share, topk_slots(options), std::move(numels)),
      ratio_(options.ratio),
      momentum_(options.error_feedback ? options.momentum : 0.0),
      warmup_steps_(options.sparsity_warmup_steps) {}

std::unique_ptr<Work> TopkCodec::launch(Bucket& bucket, int64_t step) {
  if (momentum_ > 0) {
    // DGC's momentum correction: u = m u + g; the residual (v) then accumulates u; sent
    // positions are cleared from both (momentum factor masking): the residual by the base
    // class, which leaves exact zeros there, the velocity where the residual is zero (an
    // unsent element is zero only where v itself is).
    torch::Tensor& velocity = state_.at(bucket, 1);
    velocity.mul_(momentum_).add_(bucket.flat);
    bucket.flat.copy_(velocity);
    std::unique_ptr<Work> work = GatheredCodec::launch(bucket, step);
    velocity.masked_fill_(state_.at(bucket, 0).eq(0), 0.0);
    return work;
  }
  return GatheredCodec::launch(bucket, step);
}

torch::Tensor topk_encode(const torch::Tensor& input, int64_t k) {
  DTRAIN_CHECK(input.numel() <= std::numeric_limits<int32_t>::max(),
               "topk: a bucket of {} elements exceeds int32 indices", input.numel());
  const torch::Tensor indices = std::get<1>(input.abs().topk(k, 0, true, false));
  const torch::Tensor values = input.index_select(0, indices);
  return torch::cat({to_bytes(values), to_bytes(indices.to(torch::kInt32))});
}

torch::Tensor topk_decode_sum(const torch::Tensor& messages, Range range,
                              const torch::Tensor& like) {
  const int64_t value_bytes = like.element_size();
  const int64_t k = messages.size(1) / (value_bytes + 4);
  const torch::Tensor values =
      from_bytes(messages.narrow(1, 0, k * value_bytes), like.scalar_type());
  torch::Tensor indices =
      from_bytes(messages.narrow(1, k * value_bytes, k * 4), torch::kInt32).to(torch::kInt64);
  // Into the range's place; an index outside it goes to one slot past its end, dropped (no
  // host sync, as a selection of the values in range would need).
  indices = indices.reshape({-1}).sub_(range.offset);
  indices.masked_fill_(indices.lt(0).logical_or_(indices.ge(range.numel)), range.numel);
  torch::Tensor sum = torch::zeros({range.numel + 1}, like.options());
  sum.index_add_(0, indices, values.reshape({-1}));
  return sum.narrow(0, 0, range.numel);
}

torch::Tensor TopkCodec::encode(const torch::Tensor& input, int64_t step) const {
  return topk_encode(input, topk_count(input.numel(), ratio_, step, warmup_steps_));
}

torch::Tensor TopkCodec::decode_sum(const torch::Tensor& messages, int64_t numel, Range range,
                                    const torch::Tensor& like) const {
  (void)numel;  // the indices say where each value goes
  return topk_decode_sum(messages, range, like);
}

}  // namespace dtrain::dist::compression
