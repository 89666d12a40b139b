// How ZeRO stage 1 splits a model's parameters over the ranks: each rank owns a contiguous run
// of whole tensors (in registration order), the runs balanced by element count. Whole tensors
// keep LARS's and LAMB's per-tensor norms exact and parameter groups intact with no extra
// communication (optim/trust_ratio.h); the price is balance: a rank's share exceeds
// total / ranks by at most the largest tensor.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::dist {

struct ZeroPartition {
  // Rank r owns parameters [first[r], first[r + 1]); first has ranks + 1 entries.
  std::vector<int64_t> first;
  // Every rank's region of the flat buffers, in elements: the largest share, so that
  // reduce-scatter and all-gather move equal blocks. Rank r's region starts at r * shard_numel.
  int64_t shard_numel = 0;
  // Each parameter's element offset in the flat buffers (inside its owner's region).
  std::vector<int64_t> offset;

  int owner(int64_t param) const;
};

// `numels`: the parameters' element counts, in registration order.
ZeroPartition partition_parameters(const std::vector<int64_t>& numels, int ranks);

}  // namespace dtrain::dist
