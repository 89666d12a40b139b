// How ZeRO stages 2 and 3 checkpoint their shards (dist/zero/bucket_shards.h): each rank writes
// the optimizer state of its own pieces, by slice (dist/optimizer_state.h), and reads back those
// of its new pieces from any layout. No rank sends or receives another's state.
#pragma once

#include "dist/optimizer_state.h"
#include "dist/ps/plan.h"
#include "dist/ps/shard.h"

#include <string>
#include <vector>

namespace dtrain::dist {

// The pieces rank `rank` holds under `plan`, as slices, in the order of its PsShard's pieces.
std::vector<ParamSlice> rank_slices(const PsPlan& plan, int rank);

// This rank's state file. Blocking, communicates with no one.
void save_shard_state(const PsPlan& plan, int rank, const PsShard& shard, const std::string& dir);
// The index of every rank's slices (one rank writes it). Communicates with no one.
void save_shard_index(const PsPlan& plan, int64_t num_params, const std::string& dir);
// Sets `shard`'s optimizer state from checkpoint `dir`, any layout. `params`: the model's
// trainable parameters, for their sizes and strides only. Communicates with no one.
void load_shard_state(const PsPlan& plan, int rank, const std::vector<torch::Tensor>& params,
                      const OptimizerFactory& make_optimizer, const std::string& dir,
                      PsShard& shard);

}  // namespace dtrain::dist
