// Optimizer state in checkpoint directories, in one of three layouts:
//   - whole, `optimizer.pt`: one optimizer over every parameter (single, ddp, ps);
//   - by tensor, ZeRO stage 1: `optimizer.rankR.pt`, written by rank R, an optimizer over the
//     parameters R owned, and `zero_partition.pt` (ZeroPartition::first: which ones);
//   - by slice, ZeRO stages 2 and 3: `optimizer_slices.rankR.pt`, written by rank R, the state
//     of each slice R held (a run of one parameter's elements), and `optimizer_slices.pt`:
//     every rank's slices, the index a reader picks its files by.
// Every rank of a sharded layout writes its own file: no rank holds another's state. Any
// strategy resumes from any layout, written by any number of ranks, and opens only the files
// that hold state of the parameters it needs.
#pragma once

#include "dist/strategy.h"

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::dist {

// Elements [offset, offset + numel) of trainable parameter `param`, in its memory order.
struct ParamSlice {
  int64_t param = 0;
  int64_t offset = 0;
  int64_t numel = 0;
  bool operator==(const ParamSlice& other) const {
    return param == other.param && offset == other.offset && numel == other.numel;
  }
};

// The bytes of a serialized state as a uint8 tensor, for an archive or a collective.
torch::Tensor bytes_tensor(const std::string& bytes);

// Whole.
void save_optimizer(torch::optim::Optimizer& optimizer, const std::string& dir);

// By tensor: rank `rank`'s optimizer, and (one rank) where each rank's parameters begin.
std::string zero_state_file(const std::string& dir, int rank);
std::string zero_partition_file(const std::string& dir);
void save_partition_optimizer(torch::optim::Optimizer& optimizer, const std::string& dir,
                              int rank);
void save_zero_partition(const std::vector<int64_t>& first, const std::string& dir);

// By slice: rank `rank`'s slices and their states (the bytes of dist/ps/piece_state.h's
// fields_to_bytes, aligned; empty where the optimizer keeps none), and (one rank) every rank's
// slices, by rank, of a model of `num_params` trainable parameters.
std::string slice_state_file(const std::string& dir, int rank);
std::string slice_index_file(const std::string& dir);
void save_slice_states(const std::vector<ParamSlice>& slices,
                       const std::vector<std::string>& states, const std::string& dir, int rank);
void save_slice_index(const std::vector<std::vector<ParamSlice>>& by_rank, int64_t num_params,
                      const std::string& dir);

// Sets `optimizer`'s state for params[begin, end) from checkpoint directory `dir`. `params`:
// every trainable parameter of the model, in registration order; `make_optimizer` builds an
// optimizer over any of them as the writer did (make_optimizer, the same options).
void load_optimizer_state(const std::string& dir, const std::vector<torch::Tensor>& params,
                          int64_t begin, int64_t end, const OptimizerFactory& make_optimizer,
                          torch::optim::Optimizer& optimizer);

// The state of each of `slices` from checkpoint directory `dir`, any layout: fields_to_bytes
// of the slice's fields, shaped [numel] for a parameter of at most one dimension and [numel, 1]
// otherwise (a PsShard's pieces), empty where the writer kept none. `params` give only sizes
// and strides (their values are never read: a stage-3 rank passes unallocated stand-ins).
// Holds at most the whole states of the parameters the slices touch, plus one file's.
std::vector<std::string> load_slice_states(const std::string& dir,
                                           const std::vector<torch::Tensor>& params,
                                           const std::vector<ParamSlice>& slices,
                                           const OptimizerFactory& make_optimizer);

}  // namespace dtrain::dist
