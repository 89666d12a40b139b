#include "dist/zero/unit_shards.h"

#include "common/autocast.h"
#include "common/error.h"
#include "dist/zero/flat_storage.h"

#include <algorithm>

namespace dtrain::dist {

namespace {

// Reduce-scatters in flight at once: one unit's gradients are copied out while the one
// before them is on the wire.
constexpr size_t kInFlight = 2;

int64_t byte_size(const torch::Tensor& tensor) {
  return tensor.numel() * static_cast<int64_t>(tensor.element_size());
}

}  // namespace

UnitShards::UnitShards(const PsPlan& plan, std::vector<torch::Tensor>& params, PsShard& shard,
                       std::shared_ptr<Communicator> comm, int64_t prefetch, bool gather_compute,
                       StepComm& record)
    : plan_(plan), params_(params), shard_(shard), comm_(std::move(comm)), prefetch_(prefetch),
      record_(record), units_(static_cast<int64_t>(plan.layout.size())),
      gather_compute_(gather_compute), gather_dtype_(params.front().scalar_type()) {
  // Unit by unit: attach() holds at most one unit's flat buffer on top of the model it was
  // given (whose tensors' own memory goes as each moves).
  for (const BucketLayout& unit : plan_.layout) {
    flat_.push_back(move_into_buckets(params_, {unit}).front());
    free_storage(flat_.back());
  }
  state_.assign(units_, State::kReleased);
  gathers_.resize(units_);
  cast_shard_.resize(units_);
  cast_flat_.resize(units_);
  reduced_.assign(units_, false);
  pending_.resize(kInFlight);
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
  const torch::Tensor& shard = shard_.chunk_params(my_chunk(unit));
  if (gather_dtype_ == shard.scalar_type()) {
    gathers_[unit] = comm_->all_gather(shard, flat_[unit]);
  } else {
    cast_shard_[unit] = shard.to(gather_dtype_);
    cast_flat_[unit] = torch::empty({flat_[unit].numel()}, cast_shard_[unit].options());
    gathers_[unit] = comm_->all_gather(cast_shard_[unit], cast_flat_[unit]);
  }
  state_[unit] = State::kGathering;
}

void UnitShards::choose_gather_dtype() {
  const std::optional<at::ScalarType> compute = autocast_dtype(params_.front().device().type());
  gather_dtype_ = gather_compute_ && compute ? *compute : params_.front().scalar_type();
}

void UnitShards::make_whole(int64_t unit) {
  gather(unit);
  if (state_[unit] != State::kGathering) return;
  std::shared_ptr<const TimePoint> wait_start = comm_->now();
  gathers_[unit]->wait();
  const bool cast = cast_flat_[unit].defined();
  record_.add_prefetched(Collective::kAllGather, byte_size(cast ? cast_flat_[unit] : flat_[unit]),
                         std::move(gathers_[unit]), std::move(wait_start));
  if (cast) {
    flat_[unit].copy_(cast_flat_[unit]);
    cast_shard_[unit] = torch::Tensor();
    cast_flat_[unit] = torch::Tensor();
  }
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
  choose_gather_dtype();
  make_whole(unit);
  for (int64_t ahead = 1; ahead <= prefetch_; ++ahead) gather(unit + ahead);
  poll();
}

void UnitShards::after_forward(int64_t unit) {
  if (unit == units_ - 1 && torch::GradMode::is_enabled()) return;  // its backward is next
  release(unit);
}

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
  Pending& pending = pending_[next_pending_++ % kInFlight];
  complete(pending);
  const BucketLayout& layout = plan_.layout[unit];
  // Zeros: the padding, and the parameters without a gradient (zero gradients).
  pending.flat = torch::zeros({layout.numel}, params_.front().options().requires_grad(false));
  for (size_t i = 0; i < layout.params.size(); ++i) {
    torch::Tensor& param = params_[layout.params[i]];
    torch::Tensor& grad = param.mutable_grad();
    if (!grad.defined()) continue;
    pending.flat.as_strided(param.sizes(), param.strides(), layout.offsets[i]).copy_(grad);
    grad.reset();  // no full-size gradient outlives its unit's backward
  }
  const int64_t chunk = my_chunk(unit);
  torch::Tensor target = shard_.chunk_grads(chunk);
  pending.add_to_chunk = -1;
  if (accumulate_) {  // a later micro-step: reduced beside the shard, then added to it
    pending.partner = torch::empty_like(target);
    target = pending.partner;
    pending.add_to_chunk = chunk;
  }
  pending.work = comm_->reduce_scatter(pending.flat, target, ReduceOp::kAverage);
}

void UnitShards::complete(Pending& pending) {
  if (!pending.work) return;
  pending.work->wait();
  if (pending.add_to_chunk >= 0) shard_.chunk_grads(pending.add_to_chunk).add_(pending.partner);
  record_.add(Collective::kReduceScatter, Traffic::kGradients, byte_size(pending.flat),
              std::move(pending.work));
  pending = Pending{};  // frees the unit's gradients
}

void UnitShards::start_step() {
  release_all();
  accumulate_ = false;
}

void UnitShards::release_all() {
  for (int64_t unit = 0; unit < units_; ++unit) release(unit);
}

void UnitShards::finish_backward() {
  for (int64_t unit = units_ - 1; unit >= 0; --unit) {
    if (!reduced_[unit]) reduce_gradients(unit);
    release(unit);  // the first unit, and prefetches of units that did not run
  }
  for (Pending& pending : pending_) complete(pending);
  reduced_.assign(units_, false);
  accumulate_ = true;
  // A gradient that arrived after its unit's after_backward would be lost, or counted twice
  // at the next micro-step: the hook contract (common/units.h) rules it out.
  for (size_t i = 0; i < params_.size(); ++i) {
    DTRAIN_CHECK(!params_[i].grad().defined(),
                 "zero stage 3: trainable parameter {} got its gradient after its unit's "
                 "backward ended", i);
  }
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

}  // namespace dtrain::dist
