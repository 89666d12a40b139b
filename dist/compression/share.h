// Which part of a bucket's average over ranks each rank keeps: under DDP all of it; under
// ZeRO-2 its shard, the bucket (padded to a multiple of the ranks) cut into equal shards,
// shard r on rank r (dist/zero/bucket_shards.h). A codec decodes only what its rank keeps.
#pragma once

#include <cstdint>

namespace dtrain::dist::compression {

enum class Share { kWhole, kShard };

// Elements [offset, offset + numel) of a bucket.
struct Range {
  int64_t offset = 0;
  int64_t numel = 0;
  int64_t end() const { return offset + numel; }
};

// What `rank` of `ranks` keeps of a bucket of `numel` elements (under kShard, a multiple of
// `ranks`).
Range kept_range(Share share, int64_t numel, int rank, int ranks);

}  // namespace dtrain::dist::compression
