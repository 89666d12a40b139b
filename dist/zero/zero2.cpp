#include "dist/zero/zero2.h"

#include "common/bytes.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "dist/buckets.h"
#include "dist/compression/codec_file.h"
#include "dist/zero/bucket_shards.h"
#include "dist/zero/shard_checkpoint.h"

#include <fmt/format.h>

#include <numeric>

namespace dtrain::dist {

namespace {

// Two buffers: one bucket fills while the one before it is on the wire.
constexpr int64_t kGradientBuffers = 2;

}  // namespace

Zero2Strategy::Zero2Strategy(ZeroOptions options, std::shared_ptr<Communicator> comm,
                             CompressionOptions compression)
    : ReplicatedStrategy(std::move(comm)),
      options_(std::move(options)),
      compression_(std::move(compression)) {}

Zero2Strategy::~Zero2Strategy() = default;

void Zero2Strategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  hold(model);
  require_one_dtype(params_, names_, "zero");
  make_optimizer_ = make_optimizer;
  buffer_sync_ = std::make_unique<BufferSync>(buffers_, comm_, BufferPolicy::kBroadcast);

  // Backward produces gradients roughly in reverse order of registration.
  std::vector<int64_t> order(params_.size()), numels;
  std::iota(order.rbegin(), order.rend(), 0);
  for (const torch::Tensor& param : params_) numels.push_back(param.numel());
  const auto cap = static_cast<int64_t>(options_.bucket_mb * kMiB);
  plan_ = rank_aligned_plan(packed_layout(plan_buckets(order, params_, cap, cap), params_), numels,
                            comm_->size());
  shard_ = std::make_unique<PsShard>(
      plan_, comm_->rank(), params_, params_.front().device(), make_optimizer,
      PsShard::sum_over(comm_), /*whole_tensors=*/false);

  param_flat_ = move_into_buckets(params_, plan_.layout);
  ReducerOptions reducer;
  reducer.owner = "zero";
  reducer.find_unused = true;  // a parameter without gradient counts as a zero gradient
  reducer.shared_buffers = kGradientBuffers;
  CommHook* hook = this;
  if (compression_.enabled()) {
    codec_hook_ = std::make_unique<compression::CodecHook>(
        *hook, compression::make_codec(compression_, comm_, params_, compression::Share::kShard),
        comm_, compression_.warmup_steps,
        [this](const Bucket& bucket) { return shard_grads(bucket); });
    hook = codec_hook_.get();
  }
  reducer_ = std::make_unique<GradientReducer>(params_, names_, comm_, *hook, reducer,
                                               plan_.layout);
  if (comm_->rank() == 0) {
    const int64_t element_size = static_cast<int64_t>(params_.front().element_size());
    log::info("{}", stage2_plan_line(static_cast<int64_t>(plan_.layout.size()), comm_->size(),
                                     shard_->numel() * element_size,
                                     std::accumulate(numels.begin(), numels.end(), int64_t{0}) *
                                         element_size));
  }
}

std::string stage2_plan_line(int64_t buckets, int64_t ranks, int64_t shard_bytes,
                             int64_t total_bytes) {
  return fmt::format("zero stage 2: {}, each cut into {}; each rank updates {:.3f} of the "
                     "{:.3f} MiB of parameters",
                     log::counted(buckets, "gradient bucket"), log::counted(ranks, "shard"),
                     static_cast<double>(shard_bytes) / kMiB,
                     static_cast<double>(total_bytes) / kMiB);
}

torch::Tensor Zero2Strategy::shard_grads(const Bucket& bucket) const {
  DTRAIN_CHECK(bucket.layout == plan_.layout.at(bucket.index),
               "zero: bucket {} is not the plan's", bucket.index);
  return shard_->chunk_grads(plan_.first_chunk[bucket.index] + comm_->rank());
}

std::unique_ptr<Work> Zero2Strategy::launch(Bucket& bucket) {
  return comm_->reduce_scatter(bucket.flat, shard_grads(bucket), ReduceOp::kAverage);
}

void Zero2Strategy::before_forward(int64_t step) {
  if (codec_hook_) codec_hook_->begin_step(step);
  ReplicatedStrategy::before_forward(step);
}

void Zero2Strategy::after_backward(bool last_micro_step) {
  ReplicatedStrategy::after_backward(last_micro_step);
  if (last_micro_step) shard_->bind_grads();  // a skipped step may have released them
}

void Zero2Strategy::step(double lr) {
  shard_->step(lr);
  reducer_->after_step();
  if (codec_hook_) codec_hook_->end_step(reducer_->buckets());
  torch::NoGradGuard no_grad;
  std::vector<std::unique_ptr<Work>> works;
  for (size_t b = 0; b < param_flat_.size(); ++b) {
    const int64_t chunk = plan_.first_chunk[b] + comm_->rank();
    works.push_back(comm_->all_gather(shard_->chunk_params(chunk), param_flat_[b]));
  }
  for (size_t b = 0; b < works.size(); ++b) {
    works[b]->wait();
    current_.add(Collective::kAllGather, Traffic::kParameters,
                 param_flat_[b].numel() * static_cast<int64_t>(param_flat_[b].element_size()),
                 std::move(works[b]));
  }
  end_step_record();
}

void Zero2Strategy::load_model_state(const NamedTensors& state) {
  ReplicatedStrategy::load_model_state(state);
  shard_->set_params(params_);
}

void Zero2Strategy::save_partition(const std::string& dir) const {
  const int rank = comm_->rank();
  save_shard_state(plan_, rank, *shard_, dir);
  if (!codec_hook_) return;
  write_whole_file(compression::codec_state_file(dir, rank),
                   compression::serialize_codec_state(codec_hook_->codec(), comm_->size()));
}

void Zero2Strategy::save(const std::string& dir) const {
  save_shard_index(plan_, static_cast<int64_t>(params_.size()), dir);
}

void Zero2Strategy::load(const std::string& dir) {
  // This rank's pieces, from the files that hold them (any strategy's layout).
  load_shard_state(plan_, comm_->rank(), params_, make_optimizer_, dir, *shard_);
  shard_->set_params(params_);
  if (codec_hook_) {
    compression::load_codec_state(dir, codec_hook_->codec(), static_cast<int64_t>(params_.size()),
                                  comm_->rank(), comm_->size(), comm_->device());
  } else {
    compression::skip_codec_state(dir, comm_->rank());
  }
}

Stats Zero2Strategy::stats() const {
  Stats stats = ReplicatedStrategy::stats();
  if (codec_hook_) {
    for (Stat& stat : codec_hook_->stats()) stats.push_back(std::move(stat));
  }
  return stats;
}

ReplicatedStrategy::MemoryBytes Zero2Strategy::memory() const {
  const int64_t element_size = static_cast<int64_t>(params_.front().element_size());
  MemoryBytes bytes;
  for (const torch::Tensor& flat : param_flat_) bytes.parameters += flat.numel() * element_size;
  bytes.parameters += shard_->numel() * element_size;  // the optimizer's copy of the shard
  bytes.gradients = shard_->numel() * element_size + reducer_->buffer_bytes();
  bytes.optimizer_state = static_cast<int64_t>(shard_->optimizer_state_mb() * (1 << 20));
  return bytes;
}

}  // namespace dtrain::dist
