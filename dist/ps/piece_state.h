// Optimizer state of parameter pieces: a parameter server's optimizer keeps state per piece
// (a contiguous run of a parameter's elements in memory order, held as [n] for 1-D parameters
// and [n, 1] otherwise), checkpoints keep it per whole tensor. This file moves between the two
// for any optimizer, through each state's own serialize(), as named fields. Every call copies
// the state through a TorchScript archive: for checkpoints and resumes, not for every step.
#pragma once

#include "dist/strategy.h"

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::dist {

// A parameter state's fields as its serialize() writes them, in that order: tensors and scalars.
using StateFields = std::vector<std::pair<std::string, c10::IValue>>;

// The fields of `state`, copies (on the devices of the state's tensors).
StateFields state_fields(const torch::optim::OptimizerParamState& state);
// Sets the fields of `state` its serialize() reads; tensor fields absent from `fields` keep
// their values.
void set_state_fields(torch::optim::OptimizerParamState& state, const StateFields& fields);

// Fields as bytes, for messages between ranks. fields_from_bytes puts the tensors on `device`,
// or where they were when written if none.
std::string fields_to_bytes(const StateFields& fields);
StateFields fields_from_bytes(const std::string& bytes,
                              const c10::optional<torch::Device>& device = c10::nullopt);

// The order pieces cut: `param`'s memory order, the order of its storage (for a channels_last
// parameter not the logical order). `value` has `param`'s sizes; returns [numel], a copy.
torch::Tensor to_memory_order(const torch::Tensor& value, const torch::Tensor& param);
// The inverse: `flat` [numel] as a tensor with `param`'s sizes and strides, a copy.
torch::Tensor from_memory_order(const torch::Tensor& flat, const torch::Tensor& param);

// The fields of the piece of `param` holding elements [offset, offset + numel) of its memory
// order, shaped `piece_shape`, from the fields of the whole `param`'s state. Element-wise
// fields (tensors with `param`'s sizes) are sliced; the others (step counts, 0-d tensors) are
// copied: they are the same in every piece.
StateFields slice_fields(const StateFields& whole, const torch::Tensor& param, int64_t offset,
                         int64_t numel, at::IntArrayRef piece_shape);
// The inverse of slice_fields: `pieces` start at `offsets` (increasing, from 0) and cover
// `param` exactly. A field is element-wise if in the first piece it is a tensor of at least one
// dimension with that piece's number of elements; it comes back with `param`'s sizes and
// strides. Every other field must be equal in all pieces (DTRAIN_CHECK).
StateFields join_fields(const std::vector<StateFields>& pieces,
                        const std::vector<int64_t>& offsets, const torch::Tensor& param);

// States of the types `make_optimizer`'s optimizer creates for `params` at its first step,
// index-aligned; null where it keeps none. For a receiver of fields that has no state object
// yet: their values are those of a step with zero gradients and are meant to be overwritten
// by set_state_fields. `params` are left alone (the step runs on clones, at lr 0).
std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> prototype_states(
    const OptimizerFactory& make_optimizer, const std::vector<torch::Tensor>& params);

// The state `optimizer` keeps for `param`, null if none.
const torch::optim::OptimizerParamState* find_state(const torch::optim::Optimizer& optimizer,
                                                    const torch::Tensor& param);
// Makes `state` the state `optimizer` keeps for `param`, replacing any.
void put_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param,
               std::unique_ptr<torch::optim::OptimizerParamState> state);

}  // namespace dtrain::dist
