#include "dist/ddp/ddp.h"

#include "common/bytes.h"
#include "common/error.h"
#include "common/shared_kernels.h"
#include "dist/compression/codec_file.h"
#include "dist/optimizer_state.h"
#include "optim/multi_tensor.h"

#include <numeric>

namespace dtrain::dist {

namespace {

BufferPolicy buffer_policy(const std::string& name) {
  if (name == "average") return BufferPolicy::kAverage;
  if (name == "local") return BufferPolicy::kLocal;
  return BufferPolicy::kBroadcast;
}

}  // namespace

DdpStrategy::DdpStrategy(DdpOptions options, std::shared_ptr<Communicator> comm,
                         CompressionOptions compression)
    : ReplicatedStrategy(std::move(comm)),
      options_(std::move(options)),
      compression_(std::move(compression)) {
  // "auto" is decided by the trainer (DistOptions::resolved); left undecided, it is "param".
  if (options_.reduce_dtype == "bf16") reduce_dtype_ = torch::kBFloat16;
  DTRAIN_CHECK(!(reduce_dtype_ && compression_.enabled()),
               "ddp: dist.ddp.reduce_dtype = \"bf16\" with dist.compression: choose one");
}

Layout DdpStrategy::plan_layout(const std::vector<int64_t>& order) const {
  return packed_layout(plan_buckets(order, params_,
                                    static_cast<int64_t>(options_.first_bucket_mb * kMiB),
                                    static_cast<int64_t>(options_.bucket_mb * kMiB)),
                       params_);
}

void DdpStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  hold(model);
  buffer_sync_ = std::make_unique<BufferSync>(buffers_, comm_, buffer_policy(options_.buffers));
  build_optimizer(params_, make_optimizer);

  // Backward produces gradients roughly in reverse order of registration: the first guess.
  std::vector<int64_t> order(params_.size());
  std::iota(order.rbegin(), order.rend(), 0);
  ReducerOptions reducer;
  reducer.owner = "ddp";
  reducer.overlap = options_.overlap;
  reducer.find_unused = options_.find_unused;
  reducer.unused_hint = "or set dist.ddp.find_unused = true to reduce them as zeros";
  CommHook* hook = this;
  if (compression_.enabled()) {
    codec_hook_ = std::make_unique<compression::CodecHook>(
        *hook, compression::make_codec(compression_, comm_, params_), comm_,
        compression_.warmup_steps);
    hook = codec_hook_.get();
  }
  reducer_ = std::make_unique<GradientReducer>(
      params_, names_, comm_, *hook, reducer, plan_layout(order),
      [this](const std::vector<int64_t>& observed) { return plan_layout(observed); });
}

torch::Tensor& DdpStrategy::narrow_copy(const Bucket& bucket) {
  if (static_cast<int64_t>(narrow_.size()) <= bucket.index) narrow_.resize(bucket.index + 1);
  torch::Tensor& narrow = narrow_[bucket.index];
  const bool fits = narrow.defined() && narrow.numel() == bucket.flat.numel();
  if (reduce_dtype_ && *reduce_dtype_ != bucket.flat.scalar_type() && !fits) {
    narrow = torch::zeros({bucket.flat.numel()}, bucket.flat.options().dtype(*reduce_dtype_));
  }
  return narrow;
}

std::unique_ptr<Work> DdpStrategy::launch(Bucket& bucket) {
  // Under overlap every bucket but the last is launched during backward (the last holds the
  // gradient ready last). What backward leaves untaken, the next before_backward() drops.
  const bool last = bucket.index + 1 == static_cast<int64_t>(reducer_->buckets().size());
  if (options_.overlap && !last && options_.batchnorm_beside_allreduce > 0) {
    request_shared_kernels(static_cast<int>(options_.batchnorm_beside_allreduce));
  }
  const torch::Tensor& narrow = narrow_copy(bucket);  // the reducer staged the gradients there
  return comm_->all_reduce(narrow.defined() ? narrow : bucket.flat, ReduceOp::kAverage);
}

void DdpStrategy::finish(Bucket& bucket) {
  const torch::Tensor& narrow = narrow_copy(bucket);
  if (narrow.defined()) optim::copy_({bucket.flat}, {narrow});
}

int64_t DdpStrategy::payload_bytes(const Bucket& bucket) const {
  const bool narrowed = bucket.index < static_cast<int64_t>(narrow_.size()) &&
                        narrow_[bucket.index].defined();
  const torch::Tensor& sent = narrowed ? narrow_[bucket.index] : bucket.flat;
  return sent.numel() * static_cast<int64_t>(sent.element_size());
}

void DdpStrategy::before_forward(int64_t step) {
  if (codec_hook_) codec_hook_->begin_step(step);
  ReplicatedStrategy::before_forward(step);
}

void DdpStrategy::before_backward(bool last_micro_step) {
  clear_shared_kernel_requests();
  ReplicatedStrategy::before_backward(last_micro_step);
}

void DdpStrategy::step(double lr) {
  optimizer_step(lr);
  if (codec_hook_) codec_hook_->end_step(reducer_->buckets());
  end_step_record();
}

void DdpStrategy::prepare_checkpoint() {
  if (codec_hook_) {
    gathered_codec_states_ = compression::gather_codec_states(codec_hook_->codec(), *comm_);
  }
}

void DdpStrategy::save(const std::string& dir) const {
  save_optimizer(*optimizer_, dir);
  if (!codec_hook_) return;
  DTRAIN_CHECK(static_cast<int>(gathered_codec_states_.size()) == comm_->size(),
               "ddp: save() without prepare_checkpoint() on every rank");
  compression::write_codec_states(dir, gathered_codec_states_);
}

void DdpStrategy::load(const std::string& dir) {
  load_optimizer_state(dir, params_, 0, static_cast<int64_t>(params_.size()), make_optimizer_,
                       *optimizer_);
  if (codec_hook_) {
    compression::load_codec_state(dir, codec_hook_->codec(), static_cast<int64_t>(params_.size()),
                                  comm_->rank(), comm_->size(), comm_->device());
  } else {
    compression::skip_codec_state(dir, comm_->rank());
  }
}

Stats DdpStrategy::stats() const {
  Stats stats = ReplicatedStrategy::stats();
  if (codec_hook_) {
    for (Stat& stat : codec_hook_->stats()) stats.push_back(std::move(stat));
  }
  return stats;
}

}  // namespace dtrain::dist
