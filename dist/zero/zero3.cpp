#include "dist/zero/zero3.h"

#include "common/bytes.h"
#include "common/error.h"
#include "common/log.h"
#include "dist/zero/bucket_shards.h"
#include "dist/zero/shard_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace dtrain::dist {

Zero3Strategy::Zero3Strategy(ZeroOptions options, std::shared_ptr<Communicator> comm)
    : ReplicatedStrategy(std::move(comm)), options_(std::move(options)) {}

Zero3Strategy::~Zero3Strategy() {
  if (units_) units_->set_unit_hooks(nullptr);
}

void Zero3Strategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  units_ = dynamic_cast<UnitModule*>(&model);
  if (units_ == nullptr) {
    throw UserError("dist.zero.stage = 3 needs a model made of units (dtrain::UnitModule, as "
                    "every model in models/ is), to gather each unit around its forward and "
                    "backward; use stage 2 for this model");
  }
  hold(model);
  require_one_dtype(params_, names_, "zero");
  make_optimizer_ = make_optimizer;
  buffer_sync_ = std::make_unique<BufferSync>(buffers_, comm_, BufferPolicy::kBroadcast);

  std::vector<int64_t> numels;
  for (const torch::Tensor& param : params_) numels.push_back(param.numel());
  plan_ = rank_aligned_plan(packed_layout(parameters_by_unit(*units_, params_, names_), params_),
                            numels, comm_->size());
  shard_ = std::make_unique<PsShard>(plan_, comm_->rank(), params_, params_.front().device(),
                                     make_optimizer, PsShard::sum_over(comm_),
                                     /*whole_tensors=*/false);
  unit_shards_ = std::make_unique<UnitShards>(plan_, params_, *shard_, comm_, options_.prefetch,
                                              options_.gather_dtype == "compute", current_);
  units_->set_unit_hooks(unit_shards_.get());
  if (comm_->rank() == 0) {
    const int64_t element_size = static_cast<int64_t>(params_.front().element_size());
    log::info("{}", stage3_plan_line(static_cast<int64_t>(plan_.layout.size()), comm_->size(),
                                     shard_->numel() * element_size,
                                     std::accumulate(numels.begin(), numels.end(), int64_t{0}) *
                                         element_size,
                                     options_.prefetch));
  }
}

std::string stage3_plan_line(int64_t units, int64_t ranks, int64_t shard_bytes,
                             int64_t total_bytes, int64_t prefetch) {
  return fmt::format("zero stage 3: {}, each cut into {}; each rank holds {:.3f} of the {:.3f} "
                     "MiB of parameters, with at most {} whole at once",
                     log::counted(units, "unit"), log::counted(ranks, "shard"),
                     static_cast<double>(shard_bytes) / kMiB,
                     static_cast<double>(total_bytes) / kMiB,
                     log::counted(std::min(prefetch + 1, units), "unit"));
}

std::vector<std::vector<int64_t>> parameters_by_unit(UnitModule& model,
                                                     const std::vector<torch::Tensor>& params,
                                                     const std::vector<std::string>& names) {
  const auto index_of = [&params](const torch::Tensor& tensor) -> int64_t {
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].is_same(tensor)) return static_cast<int64_t>(i);
    }
    return -1;
  };
  std::vector<std::vector<int64_t>> units;
  std::vector<bool> placed(params.size(), false);
  for (const Unit& unit : model.units()) {
    units.emplace_back();
    for (const torch::Tensor& param : unit.module->parameters()) {
      const int64_t index = index_of(param);
      if (index < 0) continue;  // frozen: not the optimizer's, stays whole
      DTRAIN_CHECK(!placed[index], "zero stage 3: parameter {} is in two units", names[index]);
      placed[index] = true;
      units.back().push_back(index);
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!placed[i]) {
      throw UserError(fmt::format("dist.zero.stage = 3: parameter {} belongs to none of the "
                                  "model's units, so nothing would gather it; use stage 2",
                                  names[i]));
    }
  }
  return units;
}

int64_t Zero3Strategy::param_index(const torch::Tensor& tensor) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].is_same(tensor)) return static_cast<int64_t>(i);
  }
  return -1;
}

void Zero3Strategy::before_forward(int64_t step) {
  ReplicatedStrategy::before_forward(step);
  unit_shards_->start_step();
}

void Zero3Strategy::before_eval() {
  ReplicatedStrategy::before_eval();
  unit_shards_->release_all();  // a last unit kept by a training forward without backward
}

void Zero3Strategy::after_backward(bool last_micro_step) {
  if (last_micro_step) current_.set_backward_end(comm_->now());
  unit_shards_->finish_backward();
  if (last_micro_step) shard_->bind_grads();  // a skipped step may have released them
}

void Zero3Strategy::step(double lr) {
  shard_->step(lr);
  end_step_record();
}

std::vector<torch::Tensor> Zero3Strategy::whole_params() const {
  std::vector<torch::Tensor> whole(params_.size());
  for (size_t u = 0; u < plan_.layout.size(); ++u) {
    const BucketLayout& layout = plan_.layout[u];
    if (layout.params.empty()) continue;
    const torch::Tensor flat = unit_shards_->gather_copy(static_cast<int64_t>(u));
    for (size_t i = 0; i < layout.params.size(); ++i) {
      const torch::Tensor& param = params_[layout.params[i]];
      whole[layout.params[i]] = flat.as_strided(param.sizes(), param.strides(), layout.offsets[i]);
    }
  }
  return whole;
}

NamedTensors Zero3Strategy::model_state() {
  NamedTensors state = module_state(*model_);
  const std::vector<torch::Tensor> whole = whole_params();
  for (auto& item : state) {
    const int64_t index = param_index(item.second);
    if (index >= 0) item.second = whole[index];
  }
  return state;
}

void Zero3Strategy::load_model_state(const NamedTensors& state) {
  const NamedTensors own = module_state(*model_);
  DTRAIN_CHECK(state.size() == own.size(), "state of {} tensors for a model of {}", state.size(),
               own.size());
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> whole(params_.size());
  NamedTensors rest, rest_targets;
  for (size_t i = 0; i < own.size(); ++i) {
    const int64_t index = param_index(own[i].second);
    if (index < 0) {
      rest.push_back(state[i]);
      rest_targets.push_back(own[i]);
      continue;
    }
    DTRAIN_CHECK(state[i].first == own[i].first, "state holds {} where the model has {}",
                 state[i].first, own[i].first);
    const torch::Tensor& param = params_[index];
    whole[index] = torch::empty_strided(param.sizes(), param.strides(), param.options());
    whole[index].copy_(state[i].second);
  }
  copy_state(rest, rest_targets);
  shard_->set_params(whole);
}

void Zero3Strategy::save_partition(const std::string& dir) const {
  save_shard_state(plan_, comm_->rank(), *shard_, dir);
}

void Zero3Strategy::save(const std::string& dir) const {
  save_shard_index(plan_, static_cast<int64_t>(params_.size()), dir);
}

void Zero3Strategy::load(const std::string& dir) {
  // The loader reads only the parameters' sizes and strides: host stand-ins that are never
  // written (the allocator maps their pages without touching them), not the gathered model.
  std::vector<torch::Tensor> shapes;
  for (const torch::Tensor& param : params_) {
    shapes.push_back(torch::empty_strided(param.sizes(), param.strides(),
                                          param.options().device(torch::kCPU)));
  }
  load_shard_state(plan_, comm_->rank(), shapes, make_optimizer_, dir, *shard_);
}

ReplicatedStrategy::MemoryBytes Zero3Strategy::memory() const {
  const int64_t shard_bytes =
      shard_->numel() * static_cast<int64_t>(params_.front().element_size());
  MemoryBytes bytes;
  bytes.parameters = shard_bytes;
  bytes.gradients = shard_bytes;
  bytes.optimizer_state = static_cast<int64_t>(shard_->optimizer_state_mb() * kMiB);
  return bytes;
}

Stats Zero3Strategy::stats() const {
  Stats stats = ReplicatedStrategy::stats();
  stats.push_back({"memory/max_whole_units", static_cast<double>(max_whole_units())});
  return stats;
}

}  // namespace dtrain::dist
