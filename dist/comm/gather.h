// Gathers of variable size: the checks that Communicator::all_gather_v makes on every backend.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace dtrain::dist {

// The checks of Communicator::all_gather_v, for its backends: `counts` has one entry per rank,
// none negative, input.numel() == counts[rank], output holds their sum, in input's dtype.
// Returns the offsets [size + 1]: rank r's elements are output[offsets[r], offsets[r + 1]).
std::vector<int64_t> all_gather_v_offsets(const torch::Tensor& input, const torch::Tensor& output,
                                          const std::vector<int64_t>& counts, int rank);

}  // namespace dtrain::dist
