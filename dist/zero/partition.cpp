#include "dist/zero/partition.h"

#include "common/error.h"

#include <algorithm>
#include <cstdlib>

namespace dtrain::dist {

int ZeroPartition::owner(int64_t param) const {
  // The last rank whose run starts at or before `param` (empty runs share their start).
  const auto it = std::upper_bound(first.begin(), first.end() - 1, param);
  return static_cast<int>(it - first.begin()) - 1;
}

ZeroPartition partition_parameters(const std::vector<int64_t>& numels, int ranks) {
  DTRAIN_CHECK(ranks >= 1, "partition over {} ranks", ranks);
  const int64_t n = static_cast<int64_t>(numels.size());
  std::vector<int64_t> prefix(static_cast<size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + numels[i];
  const int64_t total = prefix.back();

  ZeroPartition partition;
  partition.first.assign(static_cast<size_t>(ranks + 1), n);
  partition.first[0] = 0;
  // Cut r goes at the tensor boundary nearest r / ranks of the elements, never before cut r-1.
  for (int r = 1; r < ranks; ++r) {
    const double target = static_cast<double>(total) * r / ranks;
    int64_t cut = partition.first[r - 1];
    while (cut < n && std::abs(static_cast<double>(prefix[cut + 1]) - target) <=
                          std::abs(static_cast<double>(prefix[cut]) - target)) {
      ++cut;
    }
    partition.first[r] = cut;
  }

  partition.offset.resize(static_cast<size_t>(n));
  for (int r = 0; r < ranks; ++r) {
    const int64_t begin = partition.first[r], end = partition.first[r + 1];
    partition.shard_numel = std::max(partition.shard_numel, prefix[end] - prefix[begin]);
  }
  for (int r = 0; r < ranks; ++r) {
    for (int64_t i = partition.first[r]; i < partition.first[r + 1]; ++i) {
      partition.offset[i] = r * partition.shard_numel + prefix[i] - prefix[partition.first[r]];
    }
  }
  return partition;
}

}  // namespace dtrain::dist
