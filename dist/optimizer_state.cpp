#include "dist/optimizer_state.h"

#include "common/error.h"
#include "common/files.h"
#include "dist/ps/piece_state.h"
#include "optim/state_key.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <type_traits>
#include <utility>

namespace dtrain::dist {

namespace {

std::string whole_file(const std::string& dir) { return dir + "/optimizer.pt"; }

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

void require_file(const std::string& file) {
  if (!std::filesystem::exists(file)) {
    throw UserError(fmt::format("{}: missing; the checkpoint is incomplete", file));
  }
}

// `file` into `archive`, its tensors onto `device` (where they were written if none); a file
// torch cannot read is a UserError naming it.
void read_archive(const std::string& file, const c10::optional<torch::Device>& device,
                  torch::serialize::InputArchive& archive) {
  require_file(file);
  try {
    archive.load_from(file, device);
  } catch (const c10::Error& e) {
    throw UserError(
        fmt::format("{}: damaged, does not load: {}", file, first_line(e.what_without_backtrace())));
  }
}

// Onto the device of the optimizer's parameters: the writer saved its states from its own
// GPU, which on another rank is not this rank's.
void load_archive(torch::optim::Optimizer& optimizer, const std::string& file) {
  c10::optional<torch::Device> device;
  for (const auto& group : optimizer.param_groups()) {
    if (!group.params().empty()) {
      device = group.params().front().device();
      break;
    }
  }
  torch::serialize::InputArchive archive;
  read_archive(file, device, archive);
  optimizer.load(archive);
}

bool any_wanted(const std::vector<bool>& wanted, int64_t first, int64_t last) {
  return std::find(wanted.begin() + first, wanted.begin() + last, true) != wanted.begin() + last;
}

// The writer's optimizer over params[first, last), loaded from `file`, hands the states of the
// wanted ones among them to `optimizer` (states are keyed by the parameter tensor, the same
// tensors in both). A file holding none that is wanted is not opened.
void take_states(const std::string& file, const std::vector<torch::Tensor>& params,
                 int64_t first, int64_t last, const std::vector<bool>& wanted,
                 const OptimizerFactory& make_optimizer, torch::optim::Optimizer& optimizer) {
  if (!any_wanted(wanted, first, last)) return;
  const std::vector<torch::Tensor> written(params.begin() + first, params.begin() + last);
  std::unique_ptr<torch::optim::Optimizer> writer = make_optimizer(written);
  load_archive(*writer, file);
  auto& states = writer->state();
  using Key = std::decay_t<decltype(states)>::key_type;
  for (int64_t i = first; i < last; ++i) {
    if (!wanted[i]) continue;
    const auto found = states.find(optim::state_key<Key>(params[i]));
    if (found != states.end()) optimizer.state()[found->first] = found->second->clone();
  }
}

std::string model_mismatch(const std::string& dir, int64_t written, int64_t here) {
  return fmt::format("{}: optimizer state of a model with {} parameter tensors; this model has {}",
                     dir, written, here);
}

// The whole and by-tensor layouts: the wanted states into `optimizer`.
void load_by_tensor(const std::string& dir, const std::vector<torch::Tensor>& params,
                    const std::vector<bool>& wanted, const OptimizerFactory& make_optimizer,
                    torch::optim::Optimizer& optimizer) {
  const int64_t n = static_cast<int64_t>(params.size());
  if (std::filesystem::exists(whole_file(dir))) {
    take_states(whole_file(dir), params, 0, n, wanted, make_optimizer, optimizer);
    return;
  }
  if (!std::filesystem::exists(zero_partition_file(dir))) {
    throw UserError(fmt::format("{}: no optimizer state (none of optimizer.pt, "
                                "zero_partition.pt, optimizer_slices.pt)",
                                dir));
  }
  torch::Tensor saved;
  torch::load(saved, zero_partition_file(dir));
  const std::vector<int64_t> first(saved.data_ptr<int64_t>(),
                                   saved.data_ptr<int64_t>() + saved.numel());
  if (first.size() < 2 || first.back() != n) {
    throw UserError(model_mismatch(dir, first.empty() ? 0 : first.back(), n));
  }
  for (size_t rank = 0; rank + 1 < first.size(); ++rank) {
    take_states(zero_state_file(dir, static_cast<int>(rank)), params, first[rank],
                first[rank + 1], wanted, make_optimizer, optimizer);
  }
}

std::string tensor_bytes(const torch::Tensor& tensor) {
  return std::string(static_cast<const char*>(tensor.data_ptr()),
                     static_cast<size_t>(tensor.numel()));
}

// Rows [param, offset, numel] (int64), and back.
torch::Tensor slice_rows(const std::vector<ParamSlice>& slices) {
  torch::Tensor rows = torch::empty({static_cast<int64_t>(slices.size()), 3}, torch::kInt64);
  auto at = rows.accessor<int64_t, 2>();
  for (size_t i = 0; i < slices.size(); ++i) {
    at[i][0] = slices[i].param;
    at[i][1] = slices[i].offset;
    at[i][2] = slices[i].numel;
  }
  return rows;
}

std::vector<ParamSlice> slices_of(const torch::Tensor& rows) {
  TORCH_CHECK(rows.dim() == 2 && rows.size(1) == 3 && rows.scalar_type() == torch::kInt64,
              "slice rows of shape ", rows.sizes());
  std::vector<ParamSlice> slices;
  auto at = rows.accessor<int64_t, 2>();
  for (int64_t i = 0; i < rows.size(0); ++i) slices.push_back({at[i][0], at[i][1], at[i][2]});
  return slices;
}

// The index: every rank's slices, checked against this model's `num_params` parameters.
std::vector<std::vector<ParamSlice>> read_slice_index(const std::string& dir, int64_t num_params) {
  torch::serialize::InputArchive archive;
  read_archive(slice_index_file(dir), torch::Device(torch::kCPU), archive);
  torch::Tensor written, ranks;
  archive.read("num_params", written);
  archive.read("ranks", ranks);
  if (written.item<int64_t>() != num_params) {
    throw UserError(model_mismatch(dir, written.item<int64_t>(), num_params));
  }
  std::vector<std::vector<ParamSlice>> by_rank;
  for (int64_t rank = 0; rank < ranks.item<int64_t>(); ++rank) {
    torch::Tensor rows;
    archive.read(fmt::format("rank{}", rank), rows);
    by_rank.push_back(slices_of(rows));
  }
  return by_rank;
}

// Rank `rank`'s states, aligned with `listed` (its slices as the index has them).
std::vector<std::string> read_slice_states(const std::string& dir, int rank,
                                           const std::vector<ParamSlice>& listed) {
  const std::string file = slice_state_file(dir, rank);
  torch::serialize::InputArchive archive;
  read_archive(file, torch::Device(torch::kCPU), archive);
  torch::Tensor rows;
  archive.read("slices", rows);
  if (slices_of(rows) != listed) {
    throw UserError(fmt::format("{}: holds other slices than {} lists for rank {}; the "
                                "directory mixes files of two checkpoints",
                                file, slice_index_file(dir), rank));
  }
  std::vector<std::string> states;
  for (size_t i = 0; i < listed.size(); ++i) {
    torch::Tensor bytes;
    archive.read(fmt::format("state{}", i), bytes);
    states.push_back(tensor_bytes(bytes));
  }
  return states;
}

// The by-slice layout: the whole state fields of each wanted parameter the writers kept state
// for, joined from the slices of the files that hold any of them.
std::map<int64_t, StateFields> join_slices(const std::string& dir,
                                           const std::vector<torch::Tensor>& params,
                                           const std::vector<bool>& wanted) {
  const auto by_rank = read_slice_index(dir, static_cast<int64_t>(params.size()));
  std::map<int64_t, std::vector<std::pair<int64_t, StateFields>>> pieces;
  for (size_t rank = 0; rank < by_rank.size(); ++rank) {
    const std::vector<ParamSlice>& listed = by_rank[rank];
    if (std::none_of(listed.begin(), listed.end(),
                     [&](const ParamSlice& slice) { return wanted.at(slice.param); })) {
      continue;
    }
    const std::vector<std::string> states =
        read_slice_states(dir, static_cast<int>(rank), listed);
    for (size_t i = 0; i < listed.size(); ++i) {
      const ParamSlice& slice = listed[i];
      if (!wanted[slice.param] || states[i].empty()) continue;
      pieces[slice.param].emplace_back(
          slice.offset, fields_from_bytes(states[i], params[slice.param].device()));
    }
  }
  std::map<int64_t, StateFields> joined;
  for (auto& [param, found] : pieces) {
    std::sort(found.begin(), found.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<StateFields> fields;
    std::vector<int64_t> offsets;
    for (auto& [offset, piece] : found) {
      offsets.push_back(offset);
      fields.push_back(std::move(piece));
    }
    joined.emplace(param, join_fields(fields, offsets, params[param]));
  }
  return joined;
}

// Any layout: the whole state fields of each wanted parameter the writer kept state for.
std::map<int64_t, StateFields> whole_fields(const std::string& dir,
                                            const std::vector<torch::Tensor>& params,
                                            const std::vector<bool>& wanted,
                                            const OptimizerFactory& make_optimizer) {
  if (std::filesystem::exists(slice_index_file(dir))) return join_slices(dir, params, wanted);
  std::vector<torch::Tensor> taken;
  for (size_t i = 0; i < params.size(); ++i) {
    if (wanted[i]) taken.push_back(params[i]);
  }
  std::map<int64_t, StateFields> fields;
  if (taken.empty()) return fields;
  std::unique_ptr<torch::optim::Optimizer> holder = make_optimizer(taken);
  load_by_tensor(dir, params, wanted, make_optimizer, *holder);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!wanted[i]) continue;
    const torch::optim::OptimizerParamState* state = find_state(*holder, params[i]);
    if (state) fields.emplace(static_cast<int64_t>(i), state_fields(*state));
  }
  return fields;
}

}  // namespace

torch::Tensor bytes_tensor(const std::string& bytes) {
  torch::Tensor tensor = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  if (!bytes.empty()) std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
  return tensor;
}

void save_optimizer(torch::optim::Optimizer& optimizer, const std::string& dir) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  save_archive(archive, whole_file(dir));
}

std::string zero_state_file(const std::string& dir, int rank) {
  return fmt::format("{}/optimizer.rank{}.pt", dir, rank);
}

std::string zero_partition_file(const std::string& dir) { return dir + "/zero_partition.pt"; }

void save_partition_optimizer(torch::optim::Optimizer& optimizer, const std::string& dir,
                              int rank) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  save_archive(archive, zero_state_file(dir, rank));
}

void save_zero_partition(const std::vector<int64_t>& first, const std::string& dir) {
  torch::serialize::OutputArchive archive;
  archive.write("0", torch::tensor(first, torch::kInt64));  // torch::save's layout for torch::load
  save_archive(archive, zero_partition_file(dir));
}

std::string slice_state_file(const std::string& dir, int rank) {
  return fmt::format("{}/optimizer_slices.rank{}.pt", dir, rank);
}

std::string slice_index_file(const std::string& dir) { return dir + "/optimizer_slices.pt"; }

void save_slice_states(const std::vector<ParamSlice>& slices,
                       const std::vector<std::string>& states, const std::string& dir, int rank) {
  DTRAIN_CHECK(slices.size() == states.size(), "{} slices with {} states", slices.size(),
               states.size());
  torch::serialize::OutputArchive archive;
  archive.write("slices", slice_rows(slices));
  for (size_t i = 0; i < states.size(); ++i) {
    archive.write(fmt::format("state{}", i), bytes_tensor(states[i]));
  }
  save_archive(archive, slice_state_file(dir, rank));
}

void save_slice_index(const std::vector<std::vector<ParamSlice>>& by_rank, int64_t num_params,
                      const std::string& dir) {
  torch::serialize::OutputArchive archive;
  archive.write("num_params", torch::tensor(num_params, torch::kInt64));
  archive.write("ranks", torch::tensor(static_cast<int64_t>(by_rank.size()), torch::kInt64));
  for (size_t rank = 0; rank < by_rank.size(); ++rank) {
    archive.write(fmt::format("rank{}", rank), slice_rows(by_rank[rank]));
  }
  save_archive(archive, slice_index_file(dir));
}

void load_optimizer_state(const std::string& dir, const std::vector<torch::Tensor>& params,
                          int64_t begin, int64_t end, const OptimizerFactory& make_optimizer,
                          torch::optim::Optimizer& optimizer) {
  const int64_t n = static_cast<int64_t>(params.size());
  if (std::filesystem::exists(whole_file(dir)) && begin == 0 && end == n) {
    load_archive(optimizer, whole_file(dir));  // the same layout: no detour
    return;
  }
  std::vector<bool> wanted(params.size(), false);
  std::fill(wanted.begin() + begin, wanted.begin() + end, true);
  if (!std::filesystem::exists(slice_index_file(dir))) {
    load_by_tensor(dir, params, wanted, make_optimizer, optimizer);
    return;
  }
  const std::vector<torch::Tensor> range(params.begin() + begin, params.begin() + end);
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> states =
      prototype_states(make_optimizer, range);
  for (auto& [param, fields] : join_slices(dir, params, wanted)) {
    auto& state = states.at(param - begin);
    if (!state) continue;
    set_state_fields(*state, fields);
    put_state(optimizer, params[param], std::move(state));
  }
}

std::vector<std::string> load_slice_states(const std::string& dir,
                                           const std::vector<torch::Tensor>& params,
                                           const std::vector<ParamSlice>& slices,
                                           const OptimizerFactory& make_optimizer) {
  std::vector<bool> wanted(params.size(), false);
  for (const ParamSlice& slice : slices) wanted.at(slice.param) = true;
  const std::map<int64_t, StateFields> fields = whole_fields(dir, params, wanted, make_optimizer);
  std::vector<std::string> states;
  for (const ParamSlice& slice : slices) {
    const auto found = fields.find(slice.param);
    if (found == fields.end()) {
      states.emplace_back();
      continue;
    }
    const torch::Tensor& param = params[slice.param];
    const std::vector<int64_t> shape = param.dim() <= 1
                                           ? std::vector<int64_t>{slice.numel}
                                           : std::vector<int64_t>{slice.numel, 1};
    states.push_back(fields_to_bytes(
        slice_fields(found->second, param, slice.offset, slice.numel, shape)));
  }
  return states;
}

}  // namespace dtrain::dist
