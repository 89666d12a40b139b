#include "dist/buckets.h"

#include <map>
#include <string>
#include <utility>

namespace dtrain::dist {

BucketPlan plan_buckets(const std::vector<int64_t>& order,
                        const std::vector<torch::Tensor>& params, int64_t first_cap_bytes,
                        int64_t cap_bytes) {
  struct Open {
    std::vector<int64_t> indices;
    int64_t bytes = 0;
    bool first = true;
  };
  // One open bucket per dtype and device: a bucket is one flat tensor.
  std::map<std::pair<int, std::string>, Open> open;
  std::vector<std::pair<size_t, std::vector<int64_t>>> closed;  // (position of first, bucket)
  std::map<int64_t, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;

  auto close = [&](Open& bucket) {
    closed.emplace_back(position[bucket.indices.front()], std::move(bucket.indices));
    bucket.indices.clear();
    bucket.bytes = 0;
    bucket.first = false;
  };
  for (int64_t index : order) {
    const torch::Tensor& param = params.at(index);
    Open& bucket = open[{static_cast<int>(param.scalar_type()), param.device().str()}];
    bucket.indices.push_back(index);
    bucket.bytes += param.numel() * static_cast<int64_t>(param.element_size());
    if (bucket.bytes >= (bucket.first ? first_cap_bytes : cap_bytes)) close(bucket);
  }
  for (auto& [key, bucket] : open) {
    if (!bucket.indices.empty()) close(bucket);
  }
  std::sort(closed.begin(), closed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  BucketPlan plan;
  for (auto& [first, indices] : closed) plan.push_back(std::move(indices));
  return plan;
}

}  // namespace dtrain::dist
