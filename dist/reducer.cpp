#include "dist/reducer.h"

#include "common/error.h"
#include "common/log.h"
#include "optim/multi_tensor.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

namespace dtrain::dist {

Layout packed_layout(const BucketPlan& plan, const std::vector<torch::Tensor>& params) {
  Layout layout;
  for (const std::vector<int64_t>& indices : plan) {
    BucketLayout bucket;
    for (const int64_t index : indices) {
      bucket.params.push_back(index);
      bucket.offsets.push_back(bucket.numel);
      bucket.numel += params.at(index).numel();
    }
    layout.push_back(std::move(bucket));
  }
  return layout;
}

GradientReducer::GradientReducer(std::vector<torch::Tensor> params, std::vector<std::string> names,
                                 std::shared_ptr<Communicator> comm, CommHook& hook,
                                 ReducerOptions options, const Layout& layout, Planner replan)
    : params_(std::move(params)),
      names_(std::move(names)),
      comm_(std::move(comm)),
      hook_(hook),
      options_(std::move(options)),
      replan_(std::move(replan)),
      poll_in_hooks_(comm_->device().is_cpu()) {
  build(layout);
}

GradientReducer::~GradientReducer() {
  // The hooks call into this object; the model (and its accumulators) may outlive it.
  for (auto& [accumulator, key] : hooks_) accumulator->del_post_hook(key);
}

namespace {

// The parts of a bucket's flat tensor that no parameter covers, as (offset, numel).
std::vector<std::pair<int64_t, int64_t>> gaps_of(const BucketLayout& layout,
                                                 const std::vector<torch::Tensor>& params) {
  std::vector<std::pair<int64_t, int64_t>> covered;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    covered.emplace_back(layout.offsets[i], params.at(layout.params[i]).numel());
  }
  std::sort(covered.begin(), covered.end());
  std::vector<std::pair<int64_t, int64_t>> gaps;
  int64_t at = 0;
  for (const auto& [offset, numel] : covered) {
    if (offset > at) gaps.emplace_back(at, offset - at);
    at = std::max(at, offset + numel);
  }
  if (layout.numel > at) gaps.emplace_back(at, layout.numel - at);
  return gaps;
}

}  // namespace

void GradientReducer::build(const Layout& layout) {
  buckets_.clear();
  gaps_.clear();
  shared_.clear();
  bucket_of_.assign(params_.size(), -1);
  views_.assign(params_.size(), torch::Tensor());
  const bool shared = options_.shared_buffers > 0;
  if (shared) {
    int64_t largest = 0;
    for (const BucketLayout& bucket : layout) largest = std::max(largest, bucket.numel);
    const auto options = params_.front().options().requires_grad(false);
    const size_t count = std::min(layout.size(), static_cast<size_t>(options_.shared_buffers));
    for (size_t k = 0; k < count; ++k) shared_.push_back(torch::zeros({largest}, options));
  }
  for (size_t b = 0; b < layout.size(); ++b) {
    Bucket bucket{layout[b], torch::Tensor(), static_cast<int64_t>(b)};
    const auto options = params_.at(bucket.layout.params.front()).options().requires_grad(false);
    bucket.flat = shared ? shared_[b % shared_.size()].narrow(0, 0, bucket.layout.numel)
                         : torch::zeros({bucket.layout.numel}, options);
    for (size_t i = 0; i < bucket.layout.params.size(); ++i) {
      const int64_t index = bucket.layout.params[i];
      const int64_t offset = bucket.layout.offsets[i];
      torch::Tensor& param = params_[index];
      DTRAIN_CHECK(param.scalar_type() == bucket.flat.scalar_type() &&
                       param.device() == bucket.flat.device(),
                   "{}: bucket {} mixes dtypes or devices", options_.owner, b);
      // Same strides as the parameter, so accumulating into the view stays a dense add.
      torch::Tensor view = param.is_non_overlapping_and_dense()
                               ? bucket.flat.as_strided(param.sizes(), param.strides(),
                                                        bucket.flat.storage_offset() + offset)
                               : bucket.flat.narrow(0, offset, param.numel()).view(param.sizes());
      // A shared buffer holds another bucket between steps: no gradient points into it then.
      if (!shared) param.mutable_grad() = view;
      views_[index] = view;
      bucket_of_[index] = static_cast<int64_t>(b);
    }
    gaps_.push_back(gaps_of(bucket.layout, params_));
    buckets_.push_back(std::move(bucket));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    DTRAIN_CHECK(bucket_of_[i] >= 0, "{}: parameter {} is in no bucket", options_.owner, names_[i]);
  }
  pending_.assign(buckets_.size(), 0);
  works_.clear();
  works_.resize(buckets_.size());
  log::debug("{}: {} parameters in {} buckets{}", options_.owner, params_.size(), buckets_.size(),
             shared ? fmt::format(", {} shared buffers", shared_.size()) : std::string());
}

int64_t GradientReducer::buffer_bytes() const {
  int64_t bytes = 0;
  for (const torch::Tensor& buffer : shared_) bytes += static_cast<int64_t>(buffer.nbytes());
  if (!shared_.empty()) return bytes;
  for (const Bucket& bucket : buckets_) bytes += static_cast<int64_t>(bucket.flat.nbytes());
  return bytes;
}

BucketPlan GradientReducer::plan() const {
  BucketPlan plan;
  for (const Bucket& bucket : buckets_) plan.push_back(bucket.layout.params);
  return plan;
}

void GradientReducer::register_hooks() {
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

void GradientReducer::before_backward(bool last_micro_step) {
  // Not at construction: a parameter's gradient accumulator takes the stream current when it
  // is made, and backward makes that stream wait for the stream it runs on. Made by the
  // first forward, they run on that forward's stream, a CUDA graph's capture stream included
  // (which the legacy stream, current at construction, must not wait for).
  if (hooks_.empty()) register_hooks();
  reducing_ = last_micro_step;
  if (!reducing_) return;
  ready_.assign(params_.size(), false);
  arrived_ = 0;
  backward_end_.reset();
  observed_order_.clear();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = static_cast<int64_t>(buckets_[b].layout.params.size());
  }
  next_bucket_ = 0;
  completed_ = 0;
}

void GradientReducer::on_gradient_ready(int64_t index) {
  if (!reducing_) return;  // accumulating: gradients stay local until the last micro-step
  if (ready_[index]) {
    throw UserError(fmt::format("{}: gradient of {} arrived twice in one backward (backward "
                                "called twice per micro-step?)",
                                options_.owner, names_[index]));
  }
  ready_[index] = true;
  if (++arrived_ == params_.size() && !backward_end_) backward_end_ = comm_->now();
  if (!replanned_) observed_order_.push_back(index);
  --pending_[bucket_of_[index]];
  if (options_.overlap) {
    launch_ready_buckets();
    if (poll_in_hooks_ && next_bucket_ > 0) works_[next_bucket_ - 1]->test();
  }
}

// Copies the gradients autograd produced into the bucket, in one multi-tensor copy (a kernel
// per parameter costs ~4 µs of launch gap each on the compute stream, more than the copy),
// and makes the views the gradients again.
void GradientReducer::move_gradients_to_bucket(const Bucket& bucket) {
  // With a staging tensor, each gradient goes to its view's place there instead (cast by the
  // copy), and the view becomes the gradient once the hook's finish() has filled it.
  const torch::Tensor staging = hook_.staging(bucket);
  const int64_t flat_offset = bucket.flat.storage_offset();
  std::vector<torch::Tensor> sources, targets;
  for (const int64_t index : bucket.layout.params) {
    torch::Tensor& grad = params_[index].mutable_grad();
    const torch::Tensor& view = views_[index];
    const torch::Tensor target =
        staging.defined() ? staging.as_strided(view.sizes(), view.strides(),
                                               staging.storage_offset() +
                                                   view.storage_offset() - flat_offset)
                          : view;
    if (grad.defined()) {
      if (!grad.is_same(target)) {  // else accumulated into the view in place
        sources.push_back(grad);
        targets.push_back(target);
      }
    } else {
      target.zero_();  // no gradient this step (find_unused): reduced as zeros
    }
    grad = view;
  }
  optim::copy_(targets, sources);
}

void GradientReducer::zero_gaps(const Bucket& bucket) {
  for (const auto& [offset, numel] : gaps_[bucket.index]) {
    bucket.flat.narrow(0, offset, numel).zero_();
  }
}

void GradientReducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && pending_[next_bucket_] == 0) {
    Bucket& bucket = buckets_[next_bucket_];
    if (!shared_.empty()) {
      // The buffer's last user must be done with it; what it left in the gaps must go.
      if (next_bucket_ >= shared_.size()) complete(next_bucket_ - shared_.size());
      zero_gaps(bucket);
    }
    move_gradients_to_bucket(bucket);
    works_[next_bucket_] = hook_.launch(bucket);
    ++next_bucket_;
  }
}

void GradientReducer::check_unused() {
  std::vector<std::string> unused;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    unused.push_back(names_[i]);
    --pending_[bucket_of_[i]];  // its earlier micro-steps' sum, or zeros
  }
  if (unused.empty() || options_.find_unused) return;
  std::string list;
  for (size_t i = 0; i < unused.size() && i < 8; ++i) list += (i ? ", " : "") + unused[i];
  if (unused.size() > 8) list += fmt::format(" and {} more", unused.size() - 8);
  throw UserError(fmt::format("{}: {} parameter(s) received no gradient in this step: {}. Every "
                              "parameter must take part in the loss on every rank; {}",
                              options_.owner, unused.size(), list, options_.unused_hint));
}

void GradientReducer::after_backward(bool last_micro_step, StepComm& record) {
  if (!last_micro_step) return;
  record.set_backward_end(backward_end_ ? std::move(backward_end_) : comm_->now());
  check_unused();
  launch_ready_buckets();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (b >= completed_) complete(b);
    hook_.record(buckets_[b], std::move(works_[b]), record);
  }
  reducing_ = false;
}

void GradientReducer::record_replayed(StepComm& record) {
  for (const Bucket& bucket : buckets_) {
    record.add_unmeasured(hook_.collective(), Traffic::kGradients, hook_.payload_bytes(bucket));
  }
}

void GradientReducer::complete(size_t b) {
  DTRAIN_CHECK(b == completed_ && b < next_bucket_, "{}: bucket {} completed out of order",
               options_.owner, b);
  works_[b]->wait();
  hook_.finish(buckets_[b]);
  ++completed_;
  if (shared_.empty()) return;
  for (const int64_t index : buckets_[b].layout.params) params_[index].mutable_grad().reset();
}

void GradientReducer::after_step() {
  for (torch::Tensor& param : params_) param.mutable_grad().reset();
  if (!replanned_ && replan_ && !options_.find_unused) {
    // Every rank must launch the same buckets in the same order: take rank 0's observation.
    torch::Tensor order = torch::tensor(observed_order_, torch::kInt64).to(comm_->device());
    comm_->broadcast(order, 0)->wait();
    order = order.cpu();
    const Layout layout = replan_(std::vector<int64_t>(
        order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + order.numel()));
    Layout current;
    for (const Bucket& bucket : buckets_) current.push_back(bucket.layout);
    if (layout != current) {
      build(layout);
      log::debug("{}: buckets re-planned from the gradient order of the first step",
                 options_.owner);
    }
  }
  replanned_ = true;
  observed_order_.clear();
}

}  // namespace dtrain::dist
