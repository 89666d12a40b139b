// A broadcast of many tensors at once (a model's initial weights and buffers): one flattened
// copy and one collective per dtype instead of one collective per tensor.
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

}  // namespace dtrain::dist
