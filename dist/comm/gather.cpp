#include "dist/comm/gather.h"

#include "common/error.h"

namespace dtrain::dist {

std::vector<int64_t> all_gather_v_offsets(const torch::Tensor& input, const torch::Tensor& output,
                                          const std::vector<int64_t>& counts, int rank) {
  DTRAIN_CHECK(rank >= 0 && static_cast<size_t>(rank) < counts.size(),
               "all_gather_v: {} counts for rank {}; pass one count per rank", counts.size(),
               rank);
  std::vector<int64_t> offsets{0};
  for (const int64_t count : counts) {
    DTRAIN_CHECK(count >= 0, "all_gather_v: a negative count {}", count);
    offsets.push_back(offsets.back() + count);
  }
  DTRAIN_CHECK(input.numel() == counts[static_cast<size_t>(rank)],
               "all_gather_v: rank {} gives {} elements, its count says {}", rank, input.numel(),
               counts[static_cast<size_t>(rank)]);
  DTRAIN_CHECK(output.numel() == offsets.back() && output.scalar_type() == input.scalar_type(),
               "all_gather_v output holds {} x {}, needs {} x {}", output.numel(),
               c10::toString(output.scalar_type()), offsets.back(),
               c10::toString(input.scalar_type()));
  return offsets;
}

}  // namespace dtrain::dist
