#include "dist/optimizer_state.h"

#include "common/error.h"
#include "optim/state_key.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <type_traits>

namespace dtrain::dist {

namespace {

std::string whole_file(const std::string& dir) { return dir + "/optimizer.pt"; }

// Onto the device of the optimizer's parameters: the writer, rank 0, saved its states from its
// own GPU, which on another rank is not this rank's.
void load_archive(torch::optim::Optimizer& optimizer, const std::string& file) {
  c10::optional<torch::Device> device;
  for (const auto& group : optimizer.param_groups()) {
    if (!group.params().empty()) {
      device = group.params().front().device();
      break;
    }
  }
  torch::serialize::InputArchive archive;
  archive.load_from(file, device);
  optimizer.load(archive);
}

// The writer's optimizer over params[first, last), loaded from `file`, hands the states of
// params[begin, end) to `optimizer` (states are keyed by the parameter tensor, the same
// tensors in both).
void take_states(const std::string& file, const std::vector<torch::Tensor>& params,
                 int64_t first, int64_t last, int64_t begin, int64_t end,
                 const OptimizerFactory& make_optimizer, torch::optim::Optimizer& optimizer) {
  begin = std::max(begin, first);
  end = std::min(end, last);
  if (begin >= end) return;
  if (!std::filesystem::exists(file)) {
    throw UserError(fmt::format("{}: missing; the checkpoint is incomplete", file));
  }
  const std::vector<torch::Tensor> written(params.begin() + first, params.begin() + last);
  std::unique_ptr<torch::optim::Optimizer> writer = make_optimizer(written);
  load_archive(*writer, file);
  auto& states = writer->state();
  using Key = std::decay_t<decltype(states)>::key_type;
  for (int64_t i = begin; i < end; ++i) {
    const auto found = states.find(optim::state_key<Key>(params[i]));
    if (found != states.end()) optimizer.state()[found->first] = found->second->clone();
  }
}

}  // namespace

void save_optimizer(torch::optim::Optimizer& optimizer, const std::string& dir) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  archive.save_to(whole_file(dir));
}

std::string zero_state_file(const std::string& dir, int rank) {
  return fmt::format("{}/optimizer.rank{}.pt", dir, rank);
}

std::string zero_partition_file(const std::string& dir) { return dir + "/zero_partition.pt"; }

void load_optimizer_state(const std::string& dir, const std::vector<torch::Tensor>& params,
                          int64_t begin, int64_t end, const OptimizerFactory& make_optimizer,
                          torch::optim::Optimizer& optimizer) {
  const int64_t n = static_cast<int64_t>(params.size());
  if (std::filesystem::exists(whole_file(dir))) {
    if (begin == 0 && end == n) {
      load_archive(optimizer, whole_file(dir));  // the same layout: no detour
    } else {
      take_states(whole_file(dir), params, 0, n, begin, end, make_optimizer, optimizer);
    }
    return;
  }
  if (!std::filesystem::exists(zero_partition_file(dir))) {
    throw UserError(fmt::format("{}: no optimizer state (neither optimizer.pt nor "
                                "zero_partition.pt)",
                                dir));
  }
  torch::Tensor saved;
  torch::load(saved, zero_partition_file(dir));
  const std::vector<int64_t> first(saved.data_ptr<int64_t>(),
                                   saved.data_ptr<int64_t>() + saved.numel());
  if (first.size() < 2 || first.back() != n) {
    throw UserError(fmt::format("{}: optimizer state of a model with {} parameter tensors; this "
                                "model has {}",
                                dir, first.empty() ? 0 : first.back(), n));
  }
  for (size_t rank = 0; rank + 1 < first.size(); ++rank) {
    take_states(zero_state_file(dir, static_cast<int>(rank)), params, first[rank],
                first[rank + 1], begin, end, make_optimizer, optimizer);
  }
}

}  // namespace dtrain::dist
