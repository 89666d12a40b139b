#include "dist/zero/unit_shards.h"

#include "common/error.h"
#include "dist/zero/flat_storage.h"

#include <algorithm>

namespace dtrain::dist {

namespace {

// One buffer fills while the one before it is on the wire.
constexpr size_t kGradientBuffers = 2;

int64_t bytes_of(const torch::Tensor& tensor) {
  return tensor.numel() * static_cast<int64_t>(tensor.element_size());
}

}  // namespace

UnitShards::UnitShards(const PsPlan& plan, std::vector<torch::Tensor>& params, PsShard& shard,
                       std::shared_ptr<Communicator> comm, int64_t prefetch, StepComm& record)
    : plan_(plan), params_(params), shard_(shard), comm_(std::move(comm)), prefetch_(prefetch),
      record_(record), units_(static_cast<int64_t>(plan.layout.size())) {
  flat_ = move_into_buckets(params_, plan_.layout);
  for (const torch::Tensor& flat : flat_) free_storage(flat);
  state_.assign(units_, State::kReleased);
  gathers_.resize(units_);
  reduced_.assign(units_, false);

  int64_t largest = 0;
  for (const BucketLayout& unit : plan_.layout) largest = std::max(largest, unit.numel);
  const auto options = params_.front().options().requires_grad(false);
  for (size_t b = 0; b < kGradientBuffers; ++b) {
    buffers_.push_back(torch::zeros({largest}, options));
    partners_.push_back(torch::zeros({largest / comm_->size()}, options));
  }
  pending_.resize(kGradientBuffers);
}

UnitShards::~UnitShards() = default;

int64_t UnitShards::my_chunk(int64_t unit) const {
  return plan_.first_chunk[unit] + comm_->rank();
}

void UnitShards::gather(int64_t unit) {
  if (unit < 0 || unit >= units_ || !has_params(unit) || state_[unit] != State::kReleased) {
    return;
  }
  allocate_storage(flat_[unit]);
  max_whole_ = std::max(max_whole_, ++whole_);
  gathers_[unit] = comm_->all_gather(shard_.chunk_params(my_chunk(unit)), flat_[unit]);
  state_[unit] = State::kGathering;
}

void UnitShards::make_whole(int64_t unit) {
  gather(unit);
  if (state_[unit] != State::kGathering) return;
  gathers_[unit]->wait();
  record_.add(Collective::kAllGather, Traffic::kParameters, bytes_of(flat_[unit]),
              std::move(gathers_[unit]));
  state_[unit] = State::kWhole;
}

void UnitShards::release(int64_t unit) {
  if (state_[unit] == State::kReleased) return;
  make_whole(unit);  // a prefetch still in flight writes into the memory
  free_storage(flat_[unit]);
  --whole_;
  state_[unit] = State::kReleased;
}

void UnitShards::before_forward(int64_t unit) {
  DTRAIN_CHECK(unit >= 0 && unit < units_, "zero stage 3: unit {} of {}", unit, units_);
  make_whole(unit);
  for (int64_t ahead = 1; ahead <= prefetch_; ++ahead) gather(unit + ahead);
  poll();
}

void UnitShards::after_forward(int64_t unit) { release(unit); }

void UnitShards::before_backward(int64_t unit) {
  make_whole(unit);
  for (int64_t ahead = 1; ahead <= prefetch_; ++ahead) gather(unit - ahead);
  poll();
}

void UnitShards::after_backward(int64_t unit) {
  reduce_gradients(unit);
  release(unit);
  poll();
}

void UnitShards::reduce_gradients(int64_t unit) {
  DTRAIN_CHECK(!reduced_[unit], "zero stage 3: unit {} ran its backward twice in one micro-step "
               "(a unit run twice in a forward is not supported)", unit);
  reduced_[unit] = true;
  if (!has_params(unit)) return;
  const size_t b = next_buffer_++ % kGradientBuffers;
  complete(b);
  const BucketLayout& layout = plan_.layout[unit];
  torch::Tensor flat = buffers_[b].narrow(0, 0, layout.numel);
  flat.zero_();  // the padding, and parameters without a gradient (zero gradients)
  for (size_t i = 0; i < layout.params.size(); ++i) {
    torch::Tensor& param = params_[layout.params[i]];
    torch::Tensor& grad = param.mutable_grad();
    if (!grad.defined()) continue;
    flat.as_strided(param.sizes(), param.strides(), layout.offsets[i]).copy_(grad);
    grad.reset();  // no full-size gradient outlives its unit's backward
  }
  const int64_t chunk = my_chunk(unit);
  torch::Tensor target = shard_.chunk_grads(chunk);
  Pending& pending = pending_[b];
  pending.add_to_chunk = -1;
  if (accumulate_) {  // a later micro-step: reduced beside the shard, then added to it
    target = partners_[b].narrow(0, 0, target.numel());
    pending.add_to_chunk = chunk;
  }
  pending.bytes = bytes_of(flat);
  pending.work = comm_->reduce_scatter(flat, target, ReduceOp::kAverage);
}

void UnitShards::complete(size_t buffer) {
  Pending& pending = pending_[buffer];
  if (!pending.work) return;
  pending.work->wait();
  if (pending.add_to_chunk >= 0) {
    torch::Tensor grads = shard_.chunk_grads(pending.add_to_chunk);
    grads.add_(partners_[buffer].narrow(0, 0, grads.numel()));
  }
  record_.add(Collective::kReduceScatter, Traffic::kGradients, pending.bytes,
              std::move(pending.work));
  pending.work = nullptr;
}

void UnitShards::finish_backward() {
  for (int64_t unit = units_ - 1; unit >= 0; --unit) {
    if (!reduced_[unit]) reduce_gradients(unit);
    release(unit);  // the first unit, and prefetches of units that did not run
  }
  for (size_t b = 0; b < kGradientBuffers; ++b) complete(b);
  reduced_.assign(units_, false);
  accumulate_ = true;
}

void UnitShards::poll() {
  for (std::unique_ptr<Work>& work : gathers_) {
    if (work) work->test();
  }
  for (Pending& pending : pending_) {
    if (pending.work) pending.work->test();
  }
}

torch::Tensor UnitShards::gather_copy(int64_t unit) const {
  torch::Tensor whole = torch::empty({plan_.layout[unit].numel},
                                     params_.front().options().requires_grad(false));
  comm_->all_gather(shard_.chunk_params(my_chunk(unit)), whole)->wait();
  return whole;
}

int64_t UnitShards::buffer_bytes() const {
  int64_t bytes = 0;
  for (const torch::Tensor& buffer : buffers_) bytes += bytes_of(buffer);
  for (const torch::Tensor& partner : partners_) bytes += bytes_of(partner);
  return bytes;
}

}  // namespace dtrain::dist
