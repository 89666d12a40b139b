#include "dist/zero/bucket_shards.h"

#include "common/error.h"

#include <algorithm>

namespace dtrain::dist {

PsPlan rank_aligned_plan(const Layout& packed, const std::vector<int64_t>& numels, int ranks) {
  DTRAIN_CHECK(ranks >= 1, "bucket shards over {} ranks", ranks);
  PsPlan plan;
  plan.servers = ranks;
  plan.layout = packed;
  for (size_t b = 0; b < plan.layout.size(); ++b) {
    BucketLayout& bucket = plan.layout[b];
    const int64_t shard = std::max<int64_t>(1, (bucket.numel + ranks - 1) / ranks);
    bucket.numel = shard * ranks;  // the padding is the gap at the end
    plan.first_chunk.push_back(static_cast<int64_t>(plan.chunks.size()));
    for (int r = 0; r < ranks; ++r) {
      add_chunk(plan, static_cast<int64_t>(b), r * shard, shard, r, numels);
    }
  }
  plan.first_chunk.push_back(static_cast<int64_t>(plan.chunks.size()));
  return plan;
}

}  // namespace dtrain::dist
