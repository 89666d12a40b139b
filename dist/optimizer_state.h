// Optimizer state in checkpoint directories, in either of two layouts:
//   - whole, `optimizer.pt`: one optimizer over every parameter (single, ddp);
//   - sharded by ZeRO, `optimizer.rankR.pt` per rank, over the parameters rank R owned, and
//     `zero_partition.pt` (ZeroPartition::first: which ones).
// Any strategy resumes from either layout, written by any number of ranks: each parameter's
// state is whole in exactly one file.
#pragma once

#include "dist/strategy.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace dtrain::dist {

void save_optimizer(torch::optim::Optimizer& optimizer, const std::string& dir);

std::string zero_state_file(const std::string& dir, int rank);
std::string zero_partition_file(const std::string& dir);

// Sets `optimizer`'s state for params[begin, end) from checkpoint directory `dir`. `params`:
// every trainable parameter of the model, in registration order; `make_optimizer` builds an
// optimizer over a run of them as the writer did (make_optimizer, the same options).
void load_optimizer_state(const std::string& dir, const std::vector<torch::Tensor>& params,
                          int64_t begin, int64_t end, const OptimizerFactory& make_optimizer,
                          torch::optim::Optimizer& optimizer);

}  // namespace dtrain::dist
