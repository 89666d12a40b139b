#include "dist/ps/piece_state.h"

#include "common/error.h"
#include "optim/state_key.h"

#include <c10/util/accumulate.h>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include <sstream>
#include <type_traits>

namespace dtrain::dist {

namespace {

using torch::optim::OptimizerParamState;

// The archives hold no public view of what was written, so fields travel through bytes: what
// serialize() writes is read back by loading the saved archive, and what it reads is loaded
// from saved fields. Tensors keep their devices, sizes and strides.
std::string archive_bytes(torch::serialize::OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

// A field's tensors are its own: a 0-d step tensor copied into every piece must not be shared,
// or one piece's step would advance the others'.
c10::IValue copied(const c10::IValue& value) {
  return value.isTensor() ? c10::IValue(value.toTensor().clone()) : value;
}

bool same_value(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() != b.isTensor()) return false;
  if (!a.isTensor()) return a == b;
  const torch::Tensor& x = a.toTensor();
  const torch::Tensor& y = b.toTensor();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() && torch::equal(x, y.to(x.device()));
}

std::string shown(const c10::IValue& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// One element-wise field of the whole parameter from its pieces' fields.
torch::Tensor join_elementwise(const std::vector<StateFields>& pieces,
                               const std::vector<int64_t>& offsets,
                               const std::vector<int64_t>& numels, size_t field,
                               const torch::Tensor& param) {
  const std::string& name = pieces.front()[field].first;
  torch::Tensor flat =
      torch::empty({param.numel()}, pieces.front()[field].second.toTensor().options());
  for (size_t k = 0; k < pieces.size(); ++k) {
    const c10::IValue& value = pieces[k][field].second;
    DTRAIN_CHECK(value.isTensor() && value.toTensor().numel() == numels[k],
                 "field {} of piece {} (offset {}) is not a tensor of its {} elements", name, k,
                 offsets[k], numels[k]);
    flat.narrow(0, offsets[k], numels[k]).copy_(value.toTensor().reshape({-1}));
  }
  return from_memory_order(flat, param);
}

}  // namespace

StateFields state_fields(const OptimizerParamState& state) {
  torch::serialize::OutputArchive archive;
  state.serialize(archive);
  return fields_from_bytes(archive_bytes(archive));
}

void set_state_fields(OptimizerParamState& state, const StateFields& fields) {
  const std::string bytes = fields_to_bytes(fields);
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  state.serialize(archive);
}

std::string fields_to_bytes(const StateFields& fields) {
  torch::serialize::OutputArchive archive;
  for (const auto& [name, value] : fields) archive.write(name, value);
  return archive_bytes(archive);
}

StateFields fields_from_bytes(const std::string& bytes,
                              const c10::optional<torch::Device>& device) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size(), device);
  StateFields fields;
  for (const std::string& name : archive.keys()) {  // in the order written
    c10::IValue value;
    archive.read(name, value);
    fields.emplace_back(name, std::move(value));
  }
  return fields;
}

// empty_like keeps a dense tensor's strides, so its storage, read straight, is the memory order.
torch::Tensor to_memory_order(const torch::Tensor& value, const torch::Tensor& param) {
  torch::Tensor laid_out = torch::empty_like(param, value.options()).copy_(value);
  return laid_out.as_strided({laid_out.numel()}, {1});
}

torch::Tensor from_memory_order(const torch::Tensor& flat, const torch::Tensor& param) {
  torch::Tensor laid_out = torch::empty_like(param, flat.options());
  laid_out.as_strided({laid_out.numel()}, {1}).copy_(flat);
  return laid_out;
}

StateFields slice_fields(const StateFields& whole, const torch::Tensor& param, int64_t offset,
                         int64_t numel, at::IntArrayRef piece_shape) {
  DTRAIN_CHECK(offset >= 0 && numel >= 0 && offset + numel <= param.numel(),
               "piece [{}, {}) of a parameter of {} elements", offset, offset + numel,
               param.numel());
  DTRAIN_CHECK(c10::multiply_integers(piece_shape) == numel,
               "piece shape {} for {} elements", fmt::join(piece_shape, "x"), numel);
  StateFields piece;
  for (const auto& [name, value] : whole) {
    if (value.isTensor() && value.toTensor().sizes() == param.sizes()) {
      // clone: the piece must not keep the whole field's storage alive (or ship it in bytes).
      piece.emplace_back(name, to_memory_order(value.toTensor(), param)
                                   .narrow(0, offset, numel)
                                   .reshape(piece_shape)
                                   .clone());
    } else {
      piece.emplace_back(name, copied(value));
    }
  }
  return piece;
}

StateFields join_fields(const std::vector<StateFields>& pieces,
                        const std::vector<int64_t>& offsets, const torch::Tensor& param) {
  DTRAIN_CHECK(!pieces.empty() && pieces.size() == offsets.size() && offsets.front() == 0,
               "{} pieces at {} offsets, the first at {}", pieces.size(), offsets.size(),
               offsets.empty() ? -1 : offsets.front());
  std::vector<int64_t> numels;
  for (size_t k = 0; k < offsets.size(); ++k) {
    const int64_t end = k + 1 < offsets.size() ? offsets[k + 1] : param.numel();
    DTRAIN_CHECK(offsets[k] < end, "piece {} starts at {}, the next at {} (of {} elements)", k,
                 offsets[k], end, param.numel());
    numels.push_back(end - offsets[k]);
  }
  const StateFields& first = pieces.front();
  for (size_t k = 1; k < pieces.size(); ++k) {
    DTRAIN_CHECK(pieces[k].size() == first.size(), "piece {} has {} fields, piece 0 {}", k,
                 pieces[k].size(), first.size());
  }
  StateFields whole;
  for (size_t field = 0; field < first.size(); ++field) {
    const auto& [name, value] = first[field];
    for (size_t k = 1; k < pieces.size(); ++k) {
      DTRAIN_CHECK(pieces[k][field].first == name, "piece {}'s field {} is {} in piece 0", k,
                   pieces[k][field].first, name);
    }
    if (value.isTensor() && value.toTensor().dim() >= 1 && value.toTensor().numel() == numels[0]) {
      whole.emplace_back(name, join_elementwise(pieces, offsets, numels, field, param));
      continue;
    }
    for (size_t k = 1; k < pieces.size(); ++k) {
      DTRAIN_CHECK(same_value(pieces[k][field].second, value),
                   "field {} must agree in every piece: {} in piece 0, {} in piece {}", name,
                   shown(value), shown(pieces[k][field].second), k);
    }
    whole.emplace_back(name, copied(value));
  }
  return whole;
}

std::vector<std::unique_ptr<OptimizerParamState>> prototype_states(
    const OptimizerFactory& make_optimizer, const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> clones;
  for (const auto& param : params) {
    torch::Tensor clone = param.detach().clone();
    clone.set_requires_grad(true);
    clone.mutable_grad() = torch::zeros_like(clone);
    clones.push_back(clone);
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer = make_optimizer(clones);
  for (auto& group : optimizer->param_groups()) group.options().set_lr(0.0);
  optimizer->step();
  std::vector<std::unique_ptr<OptimizerParamState>> states;
  for (const auto& clone : clones) {
    const OptimizerParamState* state = find_state(*optimizer, clone);
    states.push_back(state != nullptr ? state->clone() : nullptr);
  }
  return states;
}

const OptimizerParamState* find_state(const torch::optim::Optimizer& optimizer,
                                      const torch::Tensor& param) {
  const auto& states = optimizer.state();
  using Key = std::decay_t<decltype(states)>::key_type;
  const auto found = states.find(optim::state_key<Key>(param));
  return found != states.end() ? found->second.get() : nullptr;
}

void put_state(torch::optim::Optimizer& optimizer, const torch::Tensor& param,
               std::unique_ptr<OptimizerParamState> state) {
  auto& states = optimizer.state();
  using Key = std::decay_t<decltype(states)>::key_type;
  states[optim::state_key<Key>(param)] = std::move(state);
}

}  // namespace dtrain::dist
