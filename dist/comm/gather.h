// Gathers of variable size, built on Communicator::all_gather_v: tensors whose length differs
// by rank, and byte strings (each rank's config lines, each rank's optimizer state).
#pragma once

#include "dist/comm/communicator.h"

#include <string>
#include <vector>

namespace dtrain::dist {

// Every rank's `input` (on the communicator's device, flattened, any length including zero),
// concatenated in rank order. Blocking; collective: the lengths are gathered first.
torch::Tensor all_gather_variable(Communicator& comm, const torch::Tensor& input);

// Every rank's `bytes`, by rank, on the host (through uint8 tensors on the communicator's
// device). Blocking; collective.
std::vector<std::string> all_gather_bytes(Communicator& comm, const std::string& bytes);

// The checks of Communicator::all_gather_v, for its backends: `counts` has one entry per rank,
// none negative, input.numel() == counts[rank], output holds their sum, in input's dtype.
// Returns the offsets [size + 1]: rank r's elements are output[offsets[r], offsets[r + 1]).
std::vector<int64_t> all_gather_v_offsets(const torch::Tensor& input, const torch::Tensor& output,
                                          const std::vector<int64_t>& counts, int rank);

}  // namespace dtrain::dist
