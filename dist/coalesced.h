// Collectives over many small tensors at once (initial weights, BatchNorm buffers): one
// flattened copy and one collective per dtype instead of one collective per tensor.
#pragma once

#include "dist/comm/communicator.h"

#include <memory>
#include <vector>

namespace dtrain::dist {

// Every tensor of `root` is copied into the same tensor of every rank. Returns the
// collectives, completed (for their timing).
std::vector<std::unique_ptr<Work>> broadcast_coalesced(Communicator& comm,
                                                       const std::vector<torch::Tensor>& tensors,
                                                       int root);

// Every floating-point tensor becomes its mean over the ranks; other dtypes are left alone.
std::vector<std::unique_ptr<Work>> average_coalesced(Communicator& comm,
                                                     const std::vector<torch::Tensor>& tensors);

}  // namespace dtrain::dist
