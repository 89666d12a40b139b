// How ZeRO stage 2 splits a model, as DeepSpeed's stage 2 and FSDP's flat parameters do: the
// gradient buckets are each padded to a multiple of the number of ranks and cut into that many
// equal shards, shard r of every bucket on rank r. A bucket's reduce-scatter can therefore start
// as soon as the bucket is complete (no owner mapping: every rank's block is the same size),
// and one all-gather per bucket returns its whole parameters. Tensors are not kept whole: one
// may straddle shards and ranks, and the optimizer steps its pieces with norms summed over the
// ranks (dist/ps/shard.h). Padding: fewer than `ranks` elements per bucket, zeros.
//
// The result is a parameter-server plan (dist/ps/plan.h) with chunks for shards and ranks for
// servers, so the server's shard, piece state and checkpoint conversion serve stage 2 as they
// are.
#pragma once

#include "dist/ps/plan.h"
#include "dist/reducer.h"

#include <cstdint>
#include <vector>

namespace dtrain::dist {

// `packed`: buckets of whole tensors back to back (packed_layout), in launch order. `numels`:
// the trainable parameters' element counts, in registration order. Chunk first_chunk[b] + r of
// the plan is rank r's shard of bucket b.
PsPlan rank_aligned_plan(const Layout& packed, const std::vector<int64_t>& numels, int ranks);

}  // namespace dtrain::dist
