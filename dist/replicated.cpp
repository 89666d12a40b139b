#include "dist/replicated.h"

#include "dist/coalesced.h"
#include "optim/optimizer.h"
#include "optim/state_bytes.h"

namespace dtrain::dist {

void ReplicatedStrategy::reduce_metrics(torch::Tensor values, ReduceOp op) {
  if (comm_->size() > 1) comm_->all_reduce(values, op)->wait();
}

void ReplicatedStrategy::load_model_state(const NamedTensors& state) {
  copy_state(state, module_state(*model_));
}

ReplicatedStrategy::MemoryBytes ReplicatedStrategy::memory() const {
  MemoryBytes bytes;
  for (const torch::Tensor& param : params_) {
    bytes.parameters += static_cast<int64_t>(param.nbytes());
  }
  bytes.gradients = reducer_ ? reducer_->buffer_bytes() : bytes.parameters;
  bytes.optimizer_state = static_cast<int64_t>(optim::state_bytes(*optimizer_));
  return bytes;
}

Stats ReplicatedStrategy::stats() const {
  // This rank's share, where the strategy shards it.
  const MemoryBytes bytes = memory();
  const auto mb = [](int64_t count) { return static_cast<double>(count) / (1 << 20); };
  Stats stats = {{"memory/parameters_mb", mb(bytes.parameters)},
                 {"memory/gradients_mb", mb(bytes.gradients)},
                 {"memory/optimizer_state_mb", mb(bytes.optimizer_state)}};
  if (!last_.empty()) {
    for (Stat& stat : last_.stats()) stats.push_back(std::move(stat));
  }
  return stats;
}

void ReplicatedStrategy::end_step_record() {
  last_ = std::move(current_);
  current_ = StepComm(comm_->rank(), comm_->size(), comm_->now());
}

void ReplicatedStrategy::hold(torch::nn::Module& model) {
  model_ = &model;
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  buffers_ = model.buffers();
  if (comm_->size() == 1) return;
  std::vector<torch::Tensor> state = params_;
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  torch::NoGradGuard no_grad;
  broadcast_coalesced(*comm_, state, 0);
}

void ReplicatedStrategy::build_optimizer(const std::vector<torch::Tensor>& owned,
                                         const OptimizerFactory& make) {
  make_optimizer_ = make;
  optimizer_ = make(owned);
}

void ReplicatedStrategy::before_forward(int64_t step) {
  if (buffer_sync_ && step > 0) buffer_sync_->sync(current_);  // step 0: hold() broadcast them
}

void ReplicatedStrategy::before_eval() {
  if (buffer_sync_) buffer_sync_->sync(current_);
}

void ReplicatedStrategy::before_backward(bool last_micro_step) {
  if (reducer_) reducer_->before_backward(last_micro_step);
}

void ReplicatedStrategy::after_backward(bool last_micro_step) {
  if (reducer_) reducer_->after_backward(last_micro_step, current_);
}

void ReplicatedStrategy::after_graph_pass() {
  if (reducer_) reducer_->after_step();
  // A re-plan makes the new buckets' views the gradients, for the next backward to add into:
  // a captured backward would then add each replay's gradients to the last step's.
  for (torch::Tensor& param : params_) param.mutable_grad().reset();
  current_ = StepComm(comm_->rank(), comm_->size(), comm_->now());
}

void ReplicatedStrategy::after_replayed_backward() {
  if (reducer_) reducer_->record_replayed(current_);
}

void ReplicatedStrategy::optimizer_step(double lr) {
  optim::set_lr(*optimizer_, lr);
  optimizer_->step();
  if (reducer_) {
    reducer_->after_step();
  } else {
    for (torch::Tensor& param : params_) param.mutable_grad().reset();
  }
}

}  // namespace dtrain::dist
