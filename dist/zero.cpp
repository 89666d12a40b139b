#include "dist/zero.h"

#include "common/error.h"
#include "common/log.h"
#include "dist/coalesced.h"
#include "dist/comm/gather.h"
#include "dist/optimizer_state.h"
#include "optim/lamb.h"
#include "optim/state_bytes.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace dtrain::dist {

namespace {

// Points `tensor` (the module's own parameter object) at `flat`'s storage from `offset`.
void move_into(torch::Tensor& tensor, const torch::Tensor& flat, int64_t offset) {
  flat.narrow(0, offset, tensor.numel()).copy_(tensor.reshape({-1}));
  tensor.set_(flat.storage(), flat.storage_offset() + offset, tensor.sizes(),
              tensor.contiguous().strides());
}

}  // namespace

ZeroStrategy::ZeroStrategy(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {
  if (!comm_->device().is_cpu()) {
    throw UserError(
        "dist.strategy = \"zero\" runs on CPU ranks only in this version: its NCCL path has not "
        "been validated on GPUs yet; use dist.strategy = \"ddp\" on GPUs");
  }
}

void ZeroStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  DTRAIN_CHECK(!params_.empty(), "dist.strategy = \"zero\": the model has no trainable parameters");
  for (size_t i = 1; i < params_.size(); ++i) {
    if (params_[i].scalar_type() != params_.front().scalar_type()) {
      throw UserError(fmt::format(
          "dist.strategy = \"zero\" needs every parameter in one dtype: {} is {}, {} is {}",
          names_.front(), c10::toString(params_.front().scalar_type()), names_[i],
          c10::toString(params_[i].scalar_type())));
    }
  }
  buffers_ = model.buffers();
  std::vector<torch::Tensor> state = params_;
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  torch::NoGradGuard no_grad;
  broadcast_coalesced(*comm_, state, 0);

  std::vector<int64_t> numels;
  for (const torch::Tensor& param : params_) numels.push_back(param.numel());
  partition_ = partition_parameters(numels, comm_->size());
  const auto options = params_.front().options().requires_grad(false);
  const int64_t flat_numel = partition_.shard_numel * comm_->size();
  flat_params_ = torch::zeros({flat_numel}, options);
  flat_grads_ = torch::zeros({flat_numel}, options);
  shard_grads_ = torch::zeros({partition_.shard_numel}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    move_into(params_[i], flat_params_, partition_.offset[i]);
  }

  const int rank = comm_->rank();
  for (int64_t i = partition_.first[rank]; i < partition_.first[rank + 1]; ++i) {
    owned_.push_back(params_[i]);
  }
  make_optimizer_ = make_optimizer;
  optimizer_ = make_optimizer(owned_);
  // Per-tensor norms need nothing (every tensor is whole on its owner); LAMB's gradient
  // clipping needs the norm over all ranks' gradients. In float64, which every rank has even
  // when it owns no gradient (LAMB then passes a float zero).
  if (auto* lamb = dynamic_cast<optim::Lamb*>(optimizer_.get())) {
    lamb->set_grad_norm_reducer([comm = comm_](const torch::Tensor& local) {
      torch::Tensor sum = local.to(torch::kFloat64).contiguous().clone();
      comm->all_reduce(sum, ReduceOp::kSum)->wait();
      return sum.to(local.scalar_type());
    });
  }
  log::debug("zero: rank {} owns {} of {} parameters, {} elements a shard", rank, owned_.size(),
             params_.size(), partition_.shard_numel);
}

void ZeroStrategy::before_forward(int64_t step) {
  if (step > 0) sync_buffers();  // step 0: attach() broadcast them
}

void ZeroStrategy::before_eval() { sync_buffers(); }

void ZeroStrategy::sync_buffers() {
  if (buffers_.empty()) return;
  torch::NoGradGuard no_grad;
  for (auto& work : broadcast_coalesced(*comm_, buffers_, 0)) {
    current_.buffer_works.push_back(std::move(work));
  }
}

void ZeroStrategy::after_backward(bool last_micro_step) {
  if (!last_micro_step) return;  // autograd accumulates the micro-steps' gradients
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor view = flat_grads_.narrow(0, partition_.offset[i], params_[i].numel());
    const torch::Tensor& grad = params_[i].grad();
    if (grad.defined()) {
      view.copy_(grad.reshape({-1}));
    } else {
      view.zero_();
    }
  }
  current_.works.push_back(comm_->reduce_scatter(flat_grads_, shard_grads_, ReduceOp::kAverage));
  current_.works.back()->wait();
  current_.bytes = flat_grads_.numel() * static_cast<int64_t>(flat_grads_.element_size());
  // This rank's parameters take their averaged gradients as views into the shard.
  const int rank = comm_->rank();
  const int64_t region = rank * partition_.shard_numel;
  for (int64_t i = partition_.first[rank]; i < partition_.first[rank + 1]; ++i) {
    params_[i].mutable_grad() = shard_grads_.narrow(0, partition_.offset[i] - region,
                                                    params_[i].numel())
                                    .view(params_[i].sizes());
  }
}

void ZeroStrategy::step(double lr) {
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  optimizer_->step();
  for (torch::Tensor& param : params_) param.mutable_grad().reset();
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor own =
        flat_params_.narrow(0, comm_->rank() * partition_.shard_numel, partition_.shard_numel)
            .clone();
    current_.works.push_back(comm_->all_gather(own, flat_params_));
    current_.works.back()->wait();
  }
  last_ = std::move(current_);
  current_ = {};
}

void ZeroStrategy::prepare_checkpoint() {
  std::ostringstream stream;
  torch::serialize::OutputArchive archive;
  optimizer_->save(archive);
  archive.save_to(stream);
  std::vector<std::string> all = all_gather_bytes(*comm_, stream.str());
  gathered_state_.clear();
  if (comm_->rank() != 0) return;  // only rank 0 writes
  gathered_state_ = std::move(all);
}

void ZeroStrategy::save(const std::string& dir) const {
  DTRAIN_CHECK(static_cast<int>(gathered_state_.size()) == comm_->size(),
               "zero: save() without prepare_checkpoint() on every rank");
  for (int r = 0; r < comm_->size(); ++r) {
    std::ofstream out(zero_state_file(dir, r), std::ios::binary);
    out << gathered_state_[r];
    if (!out) throw UserError(fmt::format("{}: cannot write", zero_state_file(dir, r)));
  }
  torch::save(torch::tensor(partition_.first, torch::kInt64), zero_partition_file(dir));
}

void ZeroStrategy::load(const std::string& dir) {
  // Any layout and any number of writers (optimizer_state.h): this rank takes its own states.
  const int rank = comm_->rank();
  load_optimizer_state(dir, params_, partition_.first[rank], partition_.first[rank + 1],
                       make_optimizer_, *optimizer_);
}

int64_t ZeroStrategy::optimizer_state_bytes() const { return optim::state_bytes(*optimizer_); }

std::optional<StepStats> ZeroStrategy::stats() const {
  if (last_.works.empty()) return std::nullopt;
  auto total_ms = [](const std::vector<std::unique_ptr<Work>>& works) {
    double ms = 0.0;
    for (const auto& work : works) ms += work->started()->ms_until(*work->finished());
    return ms;
  };
  const double gradient_ms = total_ms(last_.works);
  StepStats stats;
  stats.bytes = last_.bytes;
  stats.collectives = static_cast<int64_t>(last_.works.size() + last_.buffer_works.size());
  // Counted as DDP counts them: buffer broadcasts too, and none of it is overlapped here.
  stats.comm_ms = gradient_ms + total_ms(last_.buffer_works);
  stats.exposed_ms = stats.comm_ms;
  const double n = comm_->size();
  if (gradient_ms > 0.0) {
    // A reduce-scatter and an all-gather move what one all-reduce moves.
    stats.busbw_gbps =
        static_cast<double>(stats.bytes) / (gradient_ms * 1e-3) * 2.0 * (n - 1) / n / 1e9;
  }
  return stats;
}

}  // namespace dtrain::dist
