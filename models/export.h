// State-dict files shared with Python: a module's parameters and buffers as a
// torch.save-compatible dict {name: tensor}, with torchvision's names for our ResNets.
//
// Python reads one with `torch.load(path, weights_only=False)` and passes it to
// `torchvision.models.resnet50(num_classes=...).load_state_dict(sd, strict=True)`. libtorch's
// pickler tags the dict with `torch.jit._pickle.restore_type_tag`, which torch >= 2.6 rejects
// under its default weights_only=True; to keep weights_only, first run
//   import torch.jit._pickle
//   torch.serialization.add_safe_globals([torch.jit._pickle.restore_type_tag])
// (Checked with torch 2.11 / torchvision 0.26: tests/models/check_torchvision.py.)
// Python writes one for load_state_dict() with `torch.save(dict(model.state_dict()), path)`
// (a plain dict: libtorch does not unpickle collections.OrderedDict).
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace dtrain::models {

// A state dict in memory: names and tensors, in order.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes named_parameters() and named_buffers() (detached, contiguous, on the CPU) to `path`,
// through `path`.tmp and a rename, so a crash never leaves a partial file. Blocking; copies
// device tensors to the host. Throws UserError when the file cannot be written.
void save_state_dict(torch::nn::Module& module, const std::string& path);
void save_state_dict(const NamedTensors& state, const std::string& path);

// Copies the tensors of `path` into the module's parameters and buffers (keeping their device
// and dtype). The file must hold exactly the module's keys with the same shapes; otherwise
// nothing is copied and UserError names the file and every missing key, unexpected key and
// shape mismatch. Blocking.
void load_state_dict(torch::nn::Module& module, const std::string& path);
// The same into `targets` (a model's state: every name and shape it expects).
void load_state_dict(const NamedTensors& targets, const std::string& path);

}  // namespace dtrain::models
