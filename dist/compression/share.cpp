#include "dist/compression/share.h"

#include "common/error.h"

namespace dtrain::dist::compression {

Range kept_range(Share share, int64_t numel, int rank, int ranks) {
  if (share == Share::kWhole) return {0, numel};
  DTRAIN_CHECK(numel % ranks == 0, "a bucket of {} elements does not cut into {} equal shards",
               numel, ranks);
  const int64_t shard = numel / ranks;
  return {rank * shard, shard};
}

}  // namespace dtrain::dist::compression
