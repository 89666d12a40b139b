#include "dist/zero/zero.h"

#include "common/log.h"
#include "dist/optimizer_state.h"
#include "optim/optimizer.h"

#include <numeric>

namespace dtrain::dist {

namespace {

// Points `tensor` (the module's own parameter object) at `flat`'s storage from `offset`.
void move_into(torch::Tensor& tensor, const torch::Tensor& flat, int64_t offset) {
  flat.narrow(0, offset, tensor.numel()).copy_(tensor.reshape({-1}));
  tensor.set_(flat.storage(), flat.storage_offset() + offset, tensor.sizes(),
              tensor.contiguous().strides());
}

}  // namespace

ZeroStrategy::ZeroStrategy(std::shared_ptr<Communicator> comm)
    : ReplicatedStrategy(std::move(comm)) {}

void ZeroStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  hold(model);
  require_one_dtype(params_, names_, "zero");
  buffer_sync_ = std::make_unique<BufferSync>(buffers_, comm_, BufferPolicy::kBroadcast);

  std::vector<int64_t> numels;
  for (const torch::Tensor& param : params_) numels.push_back(param.numel());
  partition_ = partition_parameters(numels, comm_->size());
  const auto options = params_.front().options().requires_grad(false);
  flat_params_ = torch::zeros({partition_.shard_numel * comm_->size()}, options);
  shard_grads_ = torch::zeros({partition_.shard_numel}, options);
  BucketLayout layout;
  layout.numel = flat_params_.numel();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      move_into(params_[i], flat_params_, partition_.offset[i]);
      layout.params.push_back(static_cast<int64_t>(i));
      layout.offsets.push_back(partition_.offset[i]);
    }
  }
  const int rank = comm_->rank();
  for (int64_t i = partition_.first[rank]; i < partition_.first[rank + 1]; ++i) {
    owned_.push_back(params_[i]);
  }
  build_optimizer(owned_, make_optimizer);
  // Per-tensor norms need nothing (every tensor is whole on its owner); LAMB's gradient
  // clipping needs the norm over all ranks' gradients. In float64, which every rank has even
  // when it owns no gradient (LAMB then passes a float zero).
  optim::set_grad_norm_reducer(*optimizer_, [comm = comm_](const torch::Tensor& local) {
    torch::Tensor sum = local.to(torch::kFloat64).contiguous().clone();
    comm->all_reduce(sum, ReduceOp::kSum)->wait();
    return sum.to(local.scalar_type());
  });

  ReducerOptions reducer;
  reducer.owner = "zero";
  reducer.find_unused = true;  // a parameter without gradient counts as a zero gradient
  reducer_ = std::make_unique<GradientReducer>(params_, names_, comm_,
                                               static_cast<CommHook&>(*this), reducer,
                                               Layout{layout});
  log::debug("zero: rank {} owns {} of {} parameters, {} elements a shard", rank, owned_.size(),
             params_.size(), partition_.shard_numel);
  if (rank == 0) describe_partition(numels);
}

void ZeroStrategy::describe_partition(const std::vector<int64_t>& numels) const {
  const double mib = static_cast<double>(params_.front().element_size()) / (1 << 20);
  const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  const int64_t padded = flat_params_.numel();
  log::info("zero stage 1: whole tensors on {}; the largest share is {:.3f} of the {:.3f} "
            "MiB of parameters, and the parameters and gradients are each laid out in {} "
            "of it ({:.3f} MiB)",
            log::counted(comm_->size(), "rank"),
            static_cast<double>(partition_.shard_numel) * mib, static_cast<double>(total) * mib,
            log::counted(comm_->size(), "block"), static_cast<double>(padded) * mib);
  const std::string warning = stage1_padding_warning(comm_->size(), total, partition_.shard_numel);
  if (!warning.empty()) log::warn("{}", warning);
}

std::string stage1_padding_warning(int64_t ranks, int64_t total, int64_t shard_numel) {
  // Equal blocks, which reduce-scatter and all-gather need, cost N x the largest share, at
  // least the largest tensor: once that tensor outweighs total / N, more than DDP's memory.
  // The gradients add this rank's averaged share to the flat bucket (memory/gradients_mb).
  const double padded = static_cast<double>(shard_numel * ranks);
  if (padded <= 1.25 * static_cast<double>(total)) return "";
  return fmt::format("zero stage 1: whole tensors do not divide evenly over {} (the largest "
                     "share is {:.2f}x an even one), so its flat parameters take {:.2f}x DDP's "
                     "memory and its gradients (the flat bucket and this rank's averaged share) "
                     "{:.2f}x; dist.zero.stage = 2 splits tensors and pads under one element "
                     "per rank and bucket",
                     log::counted(ranks, "rank"), padded / static_cast<double>(total),
                     padded / static_cast<double>(total),
                     (padded + static_cast<double>(shard_numel)) / static_cast<double>(total));
}

std::unique_ptr<Work> ZeroStrategy::launch(Bucket& bucket) {
  return comm_->reduce_scatter(bucket.flat, shard_grads_, ReduceOp::kAverage);
}

void ZeroStrategy::finish(Bucket& bucket) {
  // This rank's parameters take their averaged gradients as views into the shard.
  (void)bucket;
  const int rank = comm_->rank();
  const int64_t region = rank * partition_.shard_numel;
  for (int64_t i = partition_.first[rank]; i < partition_.first[rank + 1]; ++i) {
    params_[i].mutable_grad() =
        shard_grads_.narrow(0, partition_.offset[i] - region, params_[i].numel())
            .view(params_[i].sizes());
  }
}

void ZeroStrategy::step(double lr) {
  optimizer_step(lr);
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor own =
        flat_params_.narrow(0, comm_->rank() * partition_.shard_numel, partition_.shard_numel)
            .clone();
    std::unique_ptr<Work> work = comm_->all_gather(own, flat_params_);
    work->wait();
    current_.add(Collective::kAllGather, Traffic::kParameters,
                 flat_params_.numel() * static_cast<int64_t>(flat_params_.element_size()),
                 std::move(work));
  }
  end_step_record();
}

ReplicatedStrategy::MemoryBytes ZeroStrategy::memory() const {
  MemoryBytes bytes = ReplicatedStrategy::memory();
  bytes.parameters = static_cast<int64_t>(flat_params_.nbytes());
  bytes.gradients += static_cast<int64_t>(shard_grads_.nbytes());
  return bytes;
}

void ZeroStrategy::save_partition(const std::string& dir) const {
  save_partition_optimizer(*optimizer_, dir, comm_->rank());
}

void ZeroStrategy::save(const std::string& dir) const {
  save_zero_partition(partition_.first, dir);
}

void ZeroStrategy::load(const std::string& dir) {
  // Any layout and any number of writers (optimizer_state.h): this rank takes its own states.
  const int rank = comm_->rank();
  load_optimizer_state(dir, params_, partition_.first[rank], partition_.first[rank + 1],
                       make_optimizer_, *optimizer_);
}

}  // namespace dtrain::dist
