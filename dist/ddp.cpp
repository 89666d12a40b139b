#include "dist/ddp.h"

#include "common/error.h"
#include "common/log.h"
#include "dist/coalesced.h"
#include "dist/optimizer_state.h"
#include "optim/state_bytes.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/version.h>

#include <algorithm>
#include <map>
#include <numeric>

namespace dtrain::dist {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

using TimePoints = std::vector<std::shared_ptr<const TimePoint>>;

double total_ms(const TimePoints& starts, const TimePoints& ends) {
  double ms = 0.0;
  for (size_t i = 0; i < starts.size(); ++i) ms += starts[i]->ms_until(*ends[i]);
  return ms;
}

}  // namespace

DdpStrategy::DdpStrategy(DdpOptions options, std::shared_ptr<Communicator> comm)
    : options_(std::move(options)),
      comm_(std::move(comm)),
      poll_in_hooks_(comm_->device().is_cpu()) {}

DdpStrategy::~DdpStrategy() {
  // The hooks call into this object; the model (and its accumulators) may outlive it.
  for (auto& [accumulator, key] : hooks_) accumulator->del_post_hook(key);
}

void DdpStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  buffers_ = model.buffers();
  std::vector<torch::Tensor> state = params_;
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  {
    torch::NoGradGuard no_grad;
    broadcast_coalesced(*comm_, state, 0);
  }
  flatten_buffers();
  make_optimizer_ = make_optimizer;
  optimizer_ = make_optimizer(params_);

  // Backward produces gradients roughly in reverse order of registration: the first guess.
  std::vector<int64_t> order(params_.size());
  std::iota(order.rbegin(), order.rend(), 0);
  build_buckets(plan_buckets(order, params_, static_cast<int64_t>(options_.first_bucket_mb * kMiB),
                             static_cast<int64_t>(options_.bucket_mb * kMiB)));
  register_hooks();
}

void DdpStrategy::build_buckets(const BucketPlan& plan) {
  plan_ = plan;
  buckets_.clear();
  bucket_of_.assign(params_.size(), -1);
  views_.assign(params_.size(), torch::Tensor());
  for (size_t b = 0; b < plan.size(); ++b) {
    Bucket bucket;
    bucket.params = plan[b];
    int64_t numel = 0;
    for (int64_t index : bucket.params) numel += params_[index].numel();
    const torch::Tensor& first = params_[bucket.params.front()];
    bucket.flat = torch::zeros({numel}, first.options().requires_grad(false));
    int64_t offset = 0;
    for (int64_t index : bucket.params) {
      torch::Tensor& param = params_[index];
      // Same strides as the parameter (channels_last included), so the accumulation into the
      // view stays a dense elementwise add.
      torch::Tensor view = param.is_non_overlapping_and_dense()
                               ? bucket.flat.as_strided(param.sizes(), param.strides(), offset)
                               : bucket.flat.narrow(0, offset, param.numel()).view(param.sizes());
      param.mutable_grad() = view;
      views_[index] = view;
      bucket_of_[index] = static_cast<int64_t>(b);
      offset += param.numel();
    }
    buckets_.push_back(std::move(bucket));
  }
  log::debug("ddp: {} parameters in {} buckets", params_.size(), buckets_.size());
}

void DdpStrategy::flatten_buffers() {
  torch::NoGradGuard no_grad;
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const torch::Tensor& buffer : buffers_) by_dtype[buffer.scalar_type()].push_back(buffer);
  for (auto& [dtype, group] : by_dtype) {
    int64_t numel = 0;
    for (const torch::Tensor& buffer : group) numel += buffer.numel();
    torch::Tensor flat = torch::empty({numel}, group.front().options());
    int64_t offset = 0;
    for (torch::Tensor& buffer : group) {
      flat.narrow(0, offset, buffer.numel()).copy_(buffer.reshape({-1}));
      // The module's own tensor now points into `flat`: BatchNorm updates it in place there.
      buffer.set_(flat.storage(), offset, buffer.sizes(), buffer.contiguous().strides());
      offset += buffer.numel();
    }
    flat_buffers_.push_back(flat);
  }
}

void DdpStrategy::register_hooks() {
  for (size_t i = 0; i < params_.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(params_[i]);
    const int64_t index = static_cast<int64_t>(i);
    const uintptr_t key = accumulator->add_post_hook(
        std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [this, index](const torch::autograd::variable_list& outputs,
                          const torch::autograd::variable_list&) {
              on_gradient_ready(index);
              return outputs;
            }));
    // Holding the accumulator keeps it (and the hook) alive between backward passes.
    hooks_.emplace_back(std::move(accumulator), key);
  }
}

void DdpStrategy::before_forward(int64_t step) {
  if (step > 0) sync_buffers();  // step 0: attach() broadcast them
}

void DdpStrategy::sync_buffers() {
  if (options_.buffers == "local") return;
  std::vector<std::unique_ptr<Work>> works;
  for (torch::Tensor& flat : flat_buffers_) {
    if (options_.buffers == "broadcast") {
      works.push_back(comm_->broadcast(flat, 0));
    } else if (flat.is_floating_point()) {  // counters such as num_batches_tracked agree anyway
      works.push_back(comm_->all_reduce(flat, ReduceOp::kAverage));
    }
  }
  for (auto& work : works) {
    work->wait();
    current_.buffer_starts.push_back(work->started());
    current_.buffer_ends.push_back(work->finished());
  }
}

void DdpStrategy::before_eval() { sync_buffers(); }

void DdpStrategy::before_backward(bool last_micro_step) {
  reducing_ = last_micro_step;
  if (!reducing_) return;
  ready_.assign(params_.size(), false);
  observed_order_.clear();
  for (Bucket& bucket : buckets_) bucket.pending = static_cast<int64_t>(bucket.params.size());
  next_bucket_ = 0;
}

void DdpStrategy::on_gradient_ready(int64_t index) {
  if (!reducing_) return;  // accumulating: gradients stay local until the last micro-step
  if (ready_[index]) {
    throw UserError(fmt::format("ddp: gradient of {} arrived twice in one backward (backward "
                                "called twice per micro-step?)",
                                names_[index]));
  }
  ready_[index] = true;
  if (!order_replanned_) observed_order_.push_back(index);
  --buckets_[bucket_of_[index]].pending;
  if (options_.overlap) {
    launch_ready_buckets();
    if (poll_in_hooks_ && next_bucket_ > 0) buckets_[next_bucket_ - 1].work->test();
  }
}

// step() releases the gradients, so autograd hands each parameter a fresh one (its own
// output, taken without a copy, or the sum of the step's micro-steps). When a bucket is
// complete, they are copied into it in one multi-tensor copy (a kernel per parameter costs
// ~4 µs of launch gap each on the compute stream, more than the copy), and the views become
// the gradients again, so the optimizer reads the reduced values in place.
void DdpStrategy::move_gradients_to_bucket(const Bucket& bucket) {
  std::vector<torch::Tensor> sources, targets;
  for (const int64_t index : bucket.params) {
    torch::Tensor& grad = params_[index].mutable_grad();
    const torch::Tensor& view = views_[index];
    if (grad.is_same(view)) continue;  // accumulated into the view in place
    if (grad.defined()) {
      sources.push_back(grad);
      targets.push_back(view);
    } else {
      view.zero_();  // no gradient this step (find_unused): reduced as zeros
    }
    grad = view;
  }
  if (sources.empty()) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  at::_foreach_copy_(targets, sources);
#else
  for (size_t i = 0; i < sources.size(); ++i) targets[i].copy_(sources[i]);
#endif
}

void DdpStrategy::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_++];
    move_gradients_to_bucket(bucket);
    bucket.work = comm_->all_reduce(bucket.flat, ReduceOp::kAverage);
  }
}

void DdpStrategy::after_backward(bool last_micro_step) {
  if (!last_micro_step) return;
  current_.backward_end = comm_->now();
  std::vector<std::string> unused;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    unused.push_back(names_[i]);
    --buckets_[bucket_of_[i]].pending;  // its earlier micro-steps' sum, or zeros
  }
  if (!unused.empty() && !options_.find_unused) {
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", " : "") + unused[i];
    if (unused.size() > 8) list += fmt::format(" and {} more", unused.size() - 8);
    throw UserError(fmt::format(
        "ddp: {} parameter(s) received no gradient in this step: {}. Every parameter must take "
        "part in the loss on every rank; or set dist.ddp.find_unused = true to reduce them "
        "as zeros",
        unused.size(), list));
  }
  launch_ready_buckets();
  for (Bucket& bucket : buckets_) {
    bucket.work->wait();
    current_.starts.push_back(bucket.work->started());
    current_.ends.push_back(bucket.work->finished());
    current_.bytes += bucket.flat.numel() * static_cast<int64_t>(bucket.flat.element_size());
  }
  reducing_ = false;
  last_ = std::move(current_);
  current_ = {};
}

void DdpStrategy::step(double lr) {
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  optimizer_->step();
  // Released rather than zeroed: see move_gradients_to_bucket.
  for (torch::Tensor& param : params_) param.mutable_grad().reset();
  // With unused parameters the observed order is partial and may differ across ranks: keep
  // the first guess then, as PyTorch DDP does.
  if (!order_replanned_ && !options_.find_unused) {
    replan_from_observed_order();
  }
  order_replanned_ = true;
  observed_order_.clear();
}

void DdpStrategy::replan_from_observed_order() {
  // Every rank must launch the same buckets in the same order: take rank 0's observation.
  torch::Tensor order = torch::tensor(observed_order_, torch::kInt64).to(comm_->device());
  comm_->broadcast(order, 0)->wait();
  order = order.cpu();
  const std::vector<int64_t> observed(order.data_ptr<int64_t>(),
                                      order.data_ptr<int64_t>() + order.numel());
  const BucketPlan plan = plan_buckets(observed, params_,
                                       static_cast<int64_t>(options_.first_bucket_mb * kMiB),
                                       static_cast<int64_t>(options_.bucket_mb * kMiB));
  if (plan != plan_) {
    build_buckets(plan);
    log::debug("ddp: buckets re-planned from the gradient order of the first step");
  }
}

void DdpStrategy::save(const std::string& dir) const { save_optimizer(*optimizer_, dir); }

void DdpStrategy::load(const std::string& dir) {
  load_optimizer_state(dir, params_, 0, static_cast<int64_t>(params_.size()), make_optimizer_,
                       *optimizer_);
}

int64_t DdpStrategy::optimizer_state_bytes() const { return optim::state_bytes(*optimizer_); }

std::optional<StepStats> DdpStrategy::stats() const {
  if (!last_.backward_end) return std::nullopt;
  StepStats stats;
  const double gradient_ms = total_ms(last_.starts, last_.ends);
  const double buffer_ms = total_ms(last_.buffer_starts, last_.buffer_ends);
  stats.bytes = last_.bytes;
  stats.collectives = static_cast<int64_t>(last_.starts.size() + last_.buffer_starts.size());
  stats.comm_ms = gradient_ms + buffer_ms;
  // What backward did not hide: from its end until the last bucket arrived; buffer syncs
  // block the forward, so they count whole.
  const double tail_ms = last_.ends.empty() ? 0.0 : last_.backward_end->ms_until(*last_.ends.back());
  stats.exposed_ms = std::max(0.0, tail_ms) + buffer_ms;
  const double n = comm_->size();
  if (gradient_ms > 0.0) {
    stats.busbw_gbps = static_cast<double>(last_.bytes) / (gradient_ms * 1e-3) * 2.0 * (n - 1) / n / 1e9;
  }
  return stats;
}

}  // namespace dtrain::dist
