#include "trainer/resume.h"

#include "common/error.h"
#include "common/host_wait.h"
#include "common/log.h"
#include "dist/factory.h"
#include "optim/schedule.h"
#include "trainer/config.h"
#include "trainer/toml_binding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <vector>

namespace dtrain::trainer {

namespace {

// Every rank learns which ranks of the data group failed.
std::vector<int> failed_ranks(bool failed, dist::Strategy& strategy, torch::Device device) {
  const dist::DataGroup group = strategy.data_group();
  torch::Tensor flags = torch::zeros({group.size}, torch::dtype(torch::kFloat32).device(device));
  if (failed) flags[group.rank].fill_(1.0);
  strategy.reduce_metrics(flags, dist::ReduceOp::kSum);
  const torch::Tensor host = to_host(flags);
  std::vector<int> ranks;
  for (int r = 0; r < group.size; ++r) {
    if (host[r].item<float>() > 0) ranks.push_back(r);
  }
  return ranks;
}

// Every rank learns `failed_rank`'s `error` (the others pass their own, unused), its first
// kReasonBytes bytes: the reason a checkpoint does not load is often in a file only that rank
// reads (its optimizer shard), and rank 0 is the one that reports.
std::string reason_of(int failed_rank, const std::string& error, dist::Strategy& strategy,
                      torch::Device device) {
  constexpr size_t kReasonBytes = 1024;
  std::vector<float> codes(kReasonBytes, 0.0f);
  if (strategy.data_group().rank == failed_rank) {
    for (size_t i = 0; i < std::min(error.size(), kReasonBytes); ++i) {
      codes[i] = static_cast<float>(static_cast<unsigned char>(error[i]));
    }
  }
  torch::Tensor text = torch::tensor(codes).to(device);
  strategy.reduce_metrics(text, dist::ReduceOp::kSum);  // one rank's bytes, the rest zeros
  const torch::Tensor host = to_host(text).to(torch::kUInt8);
  const auto* bytes = host.data_ptr<uint8_t>();
  return std::string(reinterpret_cast<const char*>(bytes),
                     std::find(bytes, bytes + kReasonBytes, 0) - bytes);
}

// "schedule.decay 'cosine' -> 'step'" for each schedule key and optim.lr that differ.
std::vector<std::string> schedule_key_changes(const Config& saved, const Config& now) {
  Config a = saved;
  Config b = now;
  const OptionSpecs specs_a = config_keys(a);
  const OptionSpecs specs_b = config_keys(b);
  const std::vector<KeyPath> keys_a = key_paths(specs_a);
  const std::vector<KeyPath> keys_b = key_paths(specs_b);
  std::vector<std::string> changes;
  for (size_t i = 0; i < keys_a.size() && i < keys_b.size(); ++i) {
    const std::string& path = keys_a[i].path;
    if (path.rfind("schedule.", 0) != 0 && path != "optim.lr") continue;
    const std::string before = value_text(*keys_a[i].key);
    const std::string after = value_text(*keys_b[i].key);
    if (before != after) changes.push_back(fmt::format("{} {} -> {}", path, before, after));
  }
  return changes;
}

std::string batch_change(const RunShape& saved, const RunShape& now) {
  return fmt::format(
      "global batch {} -> {} ({} -> {} rank(s) x data.batch_size {} -> {} x train.grad_accum "
      "{} -> {}): each step now reads {} samples, so the data order does not continue the "
      "checkpoint's (step s starts at sample s x {}), an epoch takes {} steps instead of {}, "
      "and optim.lr is not rescaled for the new batch",
      saved.global_batch, now.global_batch, saved.world_size, now.world_size,
      saved.config.data.batch_size, now.config.data.batch_size, saved.config.train.grad_accum,
      now.config.train.grad_accum, now.global_batch, now.global_batch, now.steps_per_epoch,
      saved.steps_per_epoch);
}

// The samples BatchNorm normalises over in training: a micro-batch, every rank's with
// model.sync_batchnorm.
int64_t batchnorm_batch(const RunShape& shape) {
  return shape.config.data.batch_size * (shape.config.model.sync_batchnorm ? shape.world_size : 1);
}

// The optimizer's state of one optim.name does not load into another's (LibTorch asserts).
void check_same_optimizer(const std::string& checkpoint, const Config& now) {
  const std::string file = (std::filesystem::path(checkpoint) / "config.toml").string();
  std::string saved;
  try {
    std::vector<std::string> warnings;
    saved = load_config(file, {}, warnings).optim.name;
  } catch (const std::exception&) {
    return;  // saved_shape() says so; the load itself decides
  }
  if (saved == now.optim.name) return;
  throw UserError(fmt::format(
      "{}: holds the optimizer state of optim.name = \"{}\", which optim.name = \"{}\" cannot "
      "continue; resume with optim.name = \"{}\"",
      checkpoint, saved, now.optim.name, saved));
}

// The shape of the run that wrote `checkpoint`.
std::optional<RunShape> saved_shape(const std::string& checkpoint, const CheckpointInfo& info) {
  if (info.global_batch <= 0 || info.steps_per_epoch <= 0) return std::nullopt;
  const std::string file = (std::filesystem::path(checkpoint) / "config.toml").string();
  RunShape shape;
  try {
    std::vector<std::string> warnings;
    shape.config = load_config(file, {}, warnings);
  } catch (const std::exception& e) {
    log::warn("{}: does not load ({}); the resumed run is not compared with it", file, e.what());
    return std::nullopt;
  }
  shape.world_size = info.world_size;
  shape.global_batch = info.global_batch;
  shape.steps_per_epoch = info.steps_per_epoch;
  shape.total_steps = info.total_steps;
  return shape;
}

}  // namespace

std::optional<Resumed> load_first_loadable(const ResumeFrom& from, const Config& config,
                                           dist::Strategy& strategy, torch::Device device) {
  if (!from.checkpoints.empty()) check_same_optimizer(from.checkpoints.front(), config);
  std::string newest_error;
  for (const std::string& path : from.checkpoints) {
    std::string error;
    CheckpointInfo info;
    try {
      info = Checkpointer::load(path, strategy);
    } catch (const UserError& e) {
      error = e.what();
    }
    const std::vector<int> ranks = failed_ranks(!error.empty(), strategy, device);
    if (ranks.empty()) return Resumed{path, info};
    const std::string reason = reason_of(ranks.front(), error, strategy, device);
    if (error.empty()) {
      error = fmt::format("{}: does not load on rank(s) {} (rank {}: {})", path,
                          fmt::join(ranks, ", "), ranks.front(), reason);
    }
    if (!from.fall_back) throw UserError(error);
    if (newest_error.empty()) newest_error = error;
    log::warn("{}; trying the next older checkpoint", error);
  }
  if (from.checkpoints.empty()) return std::nullopt;
  throw UserError(fmt::format("none of the {} complete checkpoint(s) in {} loads (the newest: "
                              "{}); choose another run.name to start afresh",
                              from.checkpoints.size(), from.where, newest_error));
}

std::vector<std::string> resume_changes(const RunShape& saved, const RunShape& now,
                                        int64_t step) {
  std::vector<std::string> changes;
  if (saved.global_batch != now.global_batch) {
    changes.push_back(batch_change(saved, now));
  } else if (batchnorm_batch(saved) != batchnorm_batch(now)) {
    changes.push_back(fmt::format(
        "{} -> {} rank(s) x data.batch_size {} -> {} x train.grad_accum {} -> {} with the same "
        "global batch {}: the data order continues, but BatchNorm takes its statistics over {} "
        "samples instead of {} ({})",
        saved.world_size, now.world_size, saved.config.data.batch_size,
        now.config.data.batch_size, saved.config.train.grad_accum, now.config.train.grad_accum,
        now.global_batch, batchnorm_batch(now), batchnorm_batch(saved),
        now.config.model.sync_batchnorm ? "model.sync_batchnorm: every rank's micro-batch"
                                        : "each rank's micro-batch"));
  }
  std::vector<std::string> causes = schedule_key_changes(saved.config, now.config);
  if (saved.total_steps != now.total_steps) {
    causes.push_back(fmt::format("total steps {} -> {} (train.max_steps, train.epochs)",
                                 saved.total_steps, now.total_steps));
  }
  if (saved.steps_per_epoch != now.steps_per_epoch) {
    causes.push_back(fmt::format("steps per epoch {} -> {}", saved.steps_per_epoch,
                                 now.steps_per_epoch));
  }
  // Where the learning rates of the steps left first differ, if they do.
  const optim::LrSchedule before(saved.config.schedule, saved.config.optim.lr,
                                 saved.steps_per_epoch, saved.total_steps);
  const optim::LrSchedule after(now.config.schedule, now.config.optim.lr, now.steps_per_epoch,
                                now.total_steps);
  int64_t first = step;
  while (first < now.total_steps && before.lr_at(first) == after.lr_at(first)) ++first;
  if (first < now.total_steps) {
    changes.push_back(fmt::format("{}: from step {} the learning rate follows another schedule "
                                  "({:.4g} there instead of {:.4g})",
                                  fmt::join(causes, ", "), first, after.lr_at(first),
                                  before.lr_at(first)));
  } else if (saved.total_steps != now.total_steps) {
    changes.push_back(fmt::format("total steps {} -> {} (train.max_steps, train.epochs): the run "
                                  "ends at step {}; the learning rates of the steps left are "
                                  "unchanged",
                                  saved.total_steps, now.total_steps, now.total_steps));
  }
  return changes;
}

void warn_resume_changes(const Resumed& resumed, const RunShape& now) {
  const std::string strategy = dist::describe_strategy(now.config.dist);
  if (resumed.info.strategy != strategy) {
    log::info("{}: written by strategy \"{}\", resumed under \"{}\"", resumed.path,
              resumed.info.strategy, strategy);
  }
  const std::optional<RunShape> saved = saved_shape(resumed.path, resumed.info);
  if (!saved) return;
  for (const std::string& change : resume_changes(*saved, now, resumed.info.step)) {
    log::warn("resuming {}: {}", resumed.path, change);
  }
}

}  // namespace dtrain::trainer
