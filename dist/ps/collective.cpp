#include "dist/ps/collective.h"

#include "common/cuda_stream.h"
#include "common/error.h"
#include "common/log.h"
#include "dist/compression/codec_file.h"
#include "dist/memory_model.h"
#include "dist/ps/whole_state.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <fmt/format.h>

#include <algorithm>

namespace dtrain::dist {

namespace {

// What the gradient reducer waits for after a bucket's pushes are issued: nothing. The
// reduces read a copy of the bucket (or, for bsp, the bucket itself, which the next backward
// writes only after this step's broadcasts, so after the reduces): they are waited for where
// their clock is applied. Testing it moves the slots' collectives on (MPI progresses only
// inside MPI calls).
class IssuedWork : public Work {
 public:
  IssuedWork(std::shared_ptr<const TimePoint> when, std::function<void()> progress)
      : when_(std::move(when)), progress_(std::move(progress)) {}
  void wait() override {}
  bool test() override {
    progress_();
    return true;
  }
  std::shared_ptr<const TimePoint> started() const override { return when_; }
  std::shared_ptr<const TimePoint> finished() const override { return when_; }
  int source() const override { return -1; }

 private:
  std::shared_ptr<const TimePoint> when_;
  std::function<void()> progress_;
};

// `stream` is the current CUDA stream for the scope (nothing without one).
class OnStream {
 public:
  explicit OnStream(const std::optional<c10::Stream>& stream) {
    if (stream) before_ = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).exchangeStream(*stream);
  }
  ~OnStream() {
    if (before_) c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).exchangeStream(*before_);
  }
  OnStream(const OnStream&) = delete;
  OnStream& operator=(const OnStream&) = delete;

 private:
  std::optional<c10::Stream> before_;
};

// The servers' work on their stream (GPUs), after what the compute stream has issued; the
// compute stream is current again at the end of the scope.
class OnServerStream : public OnStream {
 public:
  OnServerStream(const std::optional<c10::Stream>& server, c10::Device device)
      : OnStream(after_issued(server, device)) {}

 private:
  static const std::optional<c10::Stream>& after_issued(const std::optional<c10::Stream>& server,
                                                        c10::Device device) {
    if (server) {
      c10::Event issued(c10::DeviceType::CUDA);
      issued.record(current_cuda_stream(device));
      issued.block(*server);
    }
    return server;
  }
};

int64_t staleness_of(const PsOptions& options) {
  return options.consistency == "ssp" ? options.staleness : 0;
}

}  // namespace

PsCollectiveStrategy::PsCollectiveStrategy(PsOptions options, std::shared_ptr<Communicator> world,
                                           CompressionOptions compression)
    : ReplicatedStrategy(std::move(world)),
      options_(std::move(options)),
      compression_(std::move(compression)) {
  if (options_.placement != "colocated" || options_.consistency == "async") {
    throw UserError(fmt::format(
        "dist.ps.transport = \"collectives\" serves colocated bsp and ssp only (a collective "
        "joins every worker); with placement \"{}\" and consistency \"{}\" use transport "
        "\"messages\" or \"auto\"",
        options_.placement, options_.consistency));
  }
  newest_ = options_.consistency == "ssp" && options_.staleness > 0 &&
            options_.ssp_reads == "newest";
  predict_ = options_.consistency == "ssp" && options_.staleness > 0 && options_.predict_weights;
  if (comm_->device().is_cuda()) {
    const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    server_stream_ = cuda.getStreamFromGlobalPool(comm_->device());
    if (newest_) stamp_stream_ = cuda.getStreamFromGlobalPool(comm_->device());
  } else {
    push_delay_ = std::min<int64_t>(staleness_of(options_), 1);
  }
}

PsCollectiveStrategy::~PsCollectiveStrategy() = default;

void PsCollectiveStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  hold(model);
  require_one_dtype(params_, names_, "ps");
  make_optimizer_ = make_optimizer;
  const int servers = comm_->size();

  plan_ = make_ps_plan(params_, servers, options_.chunk_mb, /*keep_tensors_whole=*/false);
  if (comm_->rank() == 0) {
    const auto element_size = static_cast<int64_t>(params_.front().element_size());
    log::info("{} workers, {} consistency{}, over collectives; {}", servers, options_.consistency,
              options_.consistency == "ssp" ? fmt::format(" (staleness {})", options_.staleness)
                                            : std::string(),
              plan_.summary(names_, element_size));
    log::debug("{}", plan_.describe(names_, element_size));
    const std::string uneven = uneven_plan_warning(plan_, options_.chunk_mb, element_size);
    if (!uneven.empty()) log::warn("{}", uneven);  // as over messages: the plan is the same
  }
  // The SSP slots, refused in one line before any is allocated where they cannot fit.
  const std::string slots_problem = ps_slots_problem(
      options_, "collectives",
      ps_slot_bytes(options_, plan_, comm_->rank(),
                    static_cast<int64_t>(params_.front().element_size()),
                    comm_->device().is_cuda()),
      memory_of(comm_->device()), comm_->device().is_cuda() ? "GPU memory" : "host memory");
  if (!slots_problem.empty()) throw UserError(slots_problem);
  shard_ = std::make_unique<PsShard>(
      plan_, comm_->rank(), params_, params_.front().device(), make_optimizer,
      PsShard::sum_over(comm_), /*whole_tensors=*/false);

  param_flat_ = move_into_buckets(params_, plan_.layout);
  ReducerOptions reducer;
  reducer.owner = "ps";
  reducer.find_unused = true;  // a parameter without gradient pushes zeros
  CommHook* hook = this;
  if (compression_.enabled()) {  // the average decoded into the clock's slot
    // The casts keep the push's shape: each chunk of the cast message reduced onto its server.
    const compression::Roots servers = [this](const Bucket& bucket) {
      const size_t b = plan_bucket(plan_, bucket);
      std::vector<compression::Root> roots;
      for (int64_t c = plan_.first_chunk[b]; c < plan_.first_chunk[b + 1]; ++c) {
        const PsChunk& chunk = plan_.chunks[c];
        roots.push_back({{chunk.offset, chunk.numel}, chunk.server});
      }
      return roots;
    };
    codec_hook_ = std::make_unique<compression::CodecHook>(
        *hook,
        compression::make_codec(compression_, comm_, params_, compression::Share::kWhole,
                                servers),
        comm_, compression_.warmup_steps,
        [this](const Bucket& bucket) { return writable_grad_slot(plan_bucket(plan_, bucket)); });
    hook = codec_hook_.get();
  }
  reducer_ = std::make_unique<GradientReducer>(params_, names_, comm_, *hook, reducer,
                                               plan_.layout);
  const auto slots = [&](int64_t count) {
    std::vector<Slot> made(static_cast<size_t>(count));
    for (Slot& slot : made) {
      for (const BucketLayout& bucket : plan_.layout) {
        slot.flat.push_back(torch::zeros({bucket.numel}, param_flat_.front().options()));
      }
    }
    return made;
  };
  const int64_t k = staleness_of(options_);
  const int64_t grad_slots = server_stream_ ? k + 1 : push_delay_ + 1;
  if (grad_slots == 1) {
    // The pushes are applied before the next backward writes the buckets (on GPUs: before
    // the broadcasts the next forward waits for).
    grad_slots_.resize(1);
    for (const Bucket& bucket : reducer_->buckets()) grad_slots_[0].flat.push_back(bucket.flat);
  } else {
    grad_slots_ = slots(grad_slots);
  }
  // The parameter slots are the rows of one tensor per bucket, so that the device can pick
  // one by index (ssp_reads = "newest" on GPUs).
  // Weight prediction also needs the version before the one read.
  const int64_t param_slots = (server_stream_ ? k + 1 : k - push_delay_ + 1) + (predict_ ? 1 : 0);
  param_slots_.resize(static_cast<size_t>(param_slots));
  slot_holds_.assign(static_cast<size_t>(param_slots), -1);
  for (const BucketLayout& bucket : plan_.layout) {
    param_stack_.push_back(
        torch::zeros({param_slots, bucket.numel}, param_flat_.front().options()));
    for (int64_t i = 0; i < param_slots; ++i) {
      param_slots_[static_cast<size_t>(i)].flat.push_back(param_stack_.back()[i]);
    }
  }
  if (server_stream_) {
    for (int64_t i = 0; i < grad_slots; ++i) grad_slot_read_.emplace_back(c10::DeviceType::CUDA);
  }
  if (stamp_stream_) {
    const auto on_device = torch::TensorOptions(torch::kInt64).device(comm_->device());
    slot_version_ = torch::full({param_slots}, -1, on_device);
    for (int64_t i = 0; i < param_slots; ++i) slot_stamped_.emplace_back(c10::DeviceType::CUDA);
    device_staleness_ = torch::zeros({2}, on_device);
  }
  hold_model_version(0);
  buffer_sync_ = std::make_unique<BufferSync>(buffers_, comm_, BufferPolicy::kAverage);
}

torch::Tensor PsCollectiveStrategy::writable_grad_slot(size_t b) {
  const size_t s = static_cast<size_t>(clock_) % grad_slots_.size();
  if (server_stream_ && grad_slots_.size() > 1) {
    grad_slot_read_[s].block(current_cuda_stream(comm_->device()));
  }
  return grad_slots_[s].flat[b];
}

std::unique_ptr<Work> PsCollectiveStrategy::launch(Bucket& bucket) {
  const size_t b = plan_bucket(plan_, bucket);
  Slot& slot = grad_slots_[static_cast<size_t>(clock_) % grad_slots_.size()];
  const torch::Tensor flat = writable_grad_slot(b);
  if (!flat.is_same(bucket.flat)) {
    torch::NoGradGuard no_grad;
    flat.copy_(bucket.flat);
  }
  for (int64_t c = plan_.first_chunk[b]; c < plan_.first_chunk[b + 1]; ++c) {
    const PsChunk& chunk = plan_.chunks[c];
    slot.works.push_back(
        comm_->reduce(flat.narrow(0, chunk.offset, chunk.numel), chunk.server, ReduceOp::kSum));
  }
  return std::make_unique<IssuedWork>(comm_->now(), [this] {
    for (Slot& grads : grad_slots_) {
      for (auto& work : grads.works) work->test();
    }
  });
}

void PsCollectiveStrategy::after_backward(bool last_micro_step) {
  // The reducer's record would hold the issue moments; the plain reduces are recorded where
  // their clock is applied. A codec's exchange completes here (its decode fills the clock's
  // slot): it is recorded as this step's.
  StepComm issued(comm_->rank(), comm_->size());
  const bool compressing = codec_hook_ && codec_hook_->compressing();
  reducer_->after_backward(last_micro_step, compressing ? current_ : issued);
  if (last_micro_step) current_.set_backward_end(comm_->now());
}

void PsCollectiveStrategy::before_forward(int64_t step) {
  if (codec_hook_) codec_hook_->begin_step(step);
  const int64_t required = std::max(read_, clock_ - staleness_of(options_));
  if (newest_) {
    read_newest(required);
  } else {
    read(required);
  }
  last_staleness_ = clock_ - read_;
  max_staleness_ = std::max(max_staleness_, last_staleness_);
}

void PsCollectiveStrategy::step(double lr) {
  Slot& grads = grad_slots_[static_cast<size_t>(clock_) % grad_slots_.size()];
  grads.lr = lr;
  grads.averaged = codec_hook_ && codec_hook_->compressing();
  reducer_->after_step();
  if (codec_hook_) codec_hook_->end_step(reducer_->buckets());
  const int64_t due = clock_ - push_delay_;
  ++clock_;
  if (due >= applied_) apply(due);
  // What the step waited for is its exposed communication: the pipeline's operations ran
  // behind the compute, from one step into the next.
  for (const auto& [start, end] : waits_) current_.add_wait(start, end);
  end_step_record();
  last_waits_ = std::move(waits_);
  waits_.clear();
}

void PsCollectiveStrategy::apply(int64_t clock) {
  DTRAIN_CHECK(clock == applied_, "ps: clock {} applied after {}", clock, applied_);
  const size_t s = static_cast<size_t>(clock) % grad_slots_.size();
  Slot& grads = grad_slots_[s];
  const OnServerStream on_server(server_stream_, comm_->device());
  const auto start = comm_->now();
  // The reduces were issued bucket by bucket in plan order, one per chunk.
  for (size_t c = 0; c < grads.works.size(); ++c) {
    const PsChunk& chunk = plan_.chunks[c];
    grads.works[c]->wait();
    current_.add_pipelined(Collective::kReduce, Traffic::kGradients,
                           chunk.numel * static_cast<int64_t>(param_flat_.front().element_size()),
                           std::move(grads.works[c]), chunk.server);
  }
  grads.works.clear();
  if (!server_stream_) waits_.emplace_back(start, comm_->now());  // the host waited

  torch::NoGradGuard no_grad;
  for (const int64_t c : shard_->chunk_ids()) {
    const PsChunk& chunk = plan_.chunks[c];
    shard_->chunk_grads(c).copy_(grads.flat[chunk.bucket].narrow(0, chunk.offset, chunk.numel));
  }
  if (server_stream_) grad_slot_read_[s].record(*server_stream_);
  if (!grads.averaged) shard_->grads().div_(static_cast<double>(comm_->size()));
  shard_->step(grads.lr);
  ++applied_;

  const size_t s_out = static_cast<size_t>(applied_) % param_slots_.size();
  Slot& out = param_slots_[s_out];
  slot_holds_[s_out] = applied_;
  settle(out);  // a version no forward waited for (a newer one was read, or a sync point's skip)
  for (const int64_t c : shard_->chunk_ids()) {
    const PsChunk& chunk = plan_.chunks[c];
    out.flat[chunk.bucket].narrow(0, chunk.offset, chunk.numel).copy_(shard_->chunk_params(c));
  }
  for (const PsChunk& chunk : plan_.chunks) {
    out.works.push_back(
        comm_->broadcast(out.flat[chunk.bucket].narrow(0, chunk.offset, chunk.numel),
                         chunk.server));
  }
  if (stamp_stream_) {  // once they have landed, the slot says which version it holds
    const OnStream on_stamp(stamp_stream_);
    for (auto& work : out.works) work->wait();
    slot_version_.narrow(0, static_cast<int64_t>(s_out), 1).fill_(applied_);
    slot_stamped_[s_out].record(*stamp_stream_);
  }
}

void PsCollectiveStrategy::read(int64_t version) {
  // A prediction depends on the clock: the same version is read again, one step more stale.
  if (version < read_ || (version == read_ && !(predict_ && clock_ > version))) return;
  DTRAIN_CHECK(version <= applied_, "ps: version {} read before it was issued ({})", version,
               applied_);
  const auto slots = static_cast<int64_t>(param_slots_.size());
  const auto start = comm_->now();
  // Every version up to this one (those whose slot was not reused since: it was settled then).
  for (int64_t v = std::max(read_, applied_ - slots) + 1; v <= version; ++v) {
    settle(param_slots_[static_cast<size_t>(v % slots)]);
  }
  waits_.emplace_back(start, comm_->now());
  torch::NoGradGuard no_grad;
  const Slot& in = param_slots_[static_cast<size_t>(version % slots)];
  for (size_t b = 0; b < param_flat_.size(); ++b) param_flat_[b].copy_(in.flat[b]);
  read_ = version;
  const int64_t stale = clock_ - version;
  const auto before = static_cast<size_t>((version + slots - 1) % slots);
  if (predict_ && stale > 0 && version > 0 && slot_holds_[before] == version - 1) {  // w_v + s (w_v - w_{v-1})
    for (size_t b = 0; b < param_flat_.size(); ++b) {
      param_flat_[b].add_(in.flat[b] - param_slots_[before].flat[b], static_cast<double>(stale));
    }
  }
}

void PsCollectiveStrategy::read_newest(int64_t required) {
  const auto slots = static_cast<int64_t>(param_slots_.size());
  if (!stamp_stream_) {  // the host sees what has arrived (MPI: testing moves it on)
    int64_t newest = required;
    while (newest < applied_) {
      Slot& next = param_slots_[static_cast<size_t>((newest + 1) % slots)];
      if (!std::all_of(next.works.begin(), next.works.end(),
                       [](const std::unique_ptr<Work>& work) { return work->test(); })) {
        break;
      }
      ++newest;
    }
    read(newest);
    return;
  }
  if (applied_ == read_) {  // nothing newer than the model's version was issued
    record_device_staleness(torch::full({1}, read_, device_staleness_.options()));
    return;
  }
  // The device picks: versions up to `required` waited for, and its stamp set, so the
  // highest stamp is `required` or newer.
  const auto start = comm_->now();
  for (int64_t v = std::max(read_, applied_ - slots) + 1; v <= required; ++v) {
    settle(param_slots_[static_cast<size_t>(v % slots)]);
  }
  const c10::Stream compute = current_cuda_stream(comm_->device());
  slot_stamped_[static_cast<size_t>(required % slots)].block(compute);
  waits_.emplace_back(start, comm_->now());
  torch::NoGradGuard no_grad;
  const auto [version, index] = slot_version_.max(0, /*keepdim=*/true);
  for (size_t b = 0; b < param_flat_.size(); ++b) {
    torch::Tensor row = param_flat_[b].view({1, -1});
    torch::index_select_out(row, param_stack_[b], 0, index);
  }
  if (predict_) {  // w_v + s (w_v - w_{v-1}), s = 0 where the slot before holds no v - 1
    const torch::Tensor before = torch::remainder(index + (slots - 1), slots);
    const torch::Tensor held =
        slot_version_.index_select(0, before).eq(version - 1).logical_and_(version.gt(0));
    const torch::Tensor stale =
        (torch::rsub(version, clock_) * held).to(param_flat_.front().scalar_type()).view({1, 1});
    for (size_t b = 0; b < param_flat_.size(); ++b) {
      torch::Tensor row = param_flat_[b].view({1, -1});
      row.addcmul_(row - param_stack_[b].index_select(0, before), stale);
    }
  }
  record_device_staleness(version);
  read_ = required;
}

void PsCollectiveStrategy::record_device_staleness(const torch::Tensor& version) {
  const torch::Tensor staleness = torch::rsub(version, clock_);
  device_staleness_.narrow(0, 0, 1).copy_(staleness);
  torch::Tensor most = device_staleness_.narrow(0, 1, 1);
  torch::maximum_out(most, most, staleness);
}

void PsCollectiveStrategy::hold_model_version(size_t slot) {
  torch::NoGradGuard no_grad;
  for (size_t b = 0; b < param_flat_.size(); ++b) {
    param_stack_[b][static_cast<int64_t>(slot)].copy_(param_flat_[b]);
  }
  slot_holds_[slot] = read_;
  if (slot_version_.defined()) slot_version_.narrow(0, static_cast<int64_t>(slot), 1).fill_(read_);
}

void PsCollectiveStrategy::settle(Slot& slot) {
  const int64_t element_size = static_cast<int64_t>(param_flat_.front().element_size());
  for (size_t c = 0; c < slot.works.size(); ++c) {
    const PsChunk& chunk = plan_.chunks[c];
    slot.works[c]->wait();
    current_.add_pipelined(Collective::kBroadcast, Traffic::kParameters,
                           chunk.numel * element_size, std::move(slot.works[c]), chunk.server);
  }
  slot.works.clear();
}

void PsCollectiveStrategy::sync_point() {
  while (applied_ < clock_) apply(applied_);
  read(applied_);
  for (Slot& slot : param_slots_) settle(slot);  // versions skipped: complete their broadcasts
  if (server_stream_) {  // the shard's state, read on the compute stream from here on
    c10::Event applied(c10::DeviceType::CUDA);
    applied.record(*server_stream_);
    applied.block(current_cuda_stream(comm_->device()));
  }
  if (comm_->size() > 1) buffer_sync_->sync(current_);
}

NamedTensors PsCollectiveStrategy::model_state() {
  sync_point();
  return module_state(*model_);
}

void PsCollectiveStrategy::load_model_state(const NamedTensors& state) {
  copy_state(state, module_state(*model_));
  shard_->set_params(params_);
  // The model's version, loaded: the one a forward may fall back to, or predict from.
  hold_model_version(static_cast<size_t>(read_) % param_slots_.size());
}

void PsCollectiveStrategy::prepare_checkpoint() {
  sync_point();
  gathered_ = gather_states_on_rank0(*comm_, shard_->state());  // only rank 0 writes
  if (codec_hook_) {
    gathered_codec_states_ = compression::gather_codec_states(codec_hook_->codec(), *comm_);
  }
}

void PsCollectiveStrategy::save(const std::string& dir) const {
  save_whole_state(dir, plan_, params_, names_, make_optimizer_, gathered_);
  if (codec_hook_) compression::write_codec_states(dir, gathered_codec_states_);
}

void PsCollectiveStrategy::load(const std::string& dir) {
  load_whole_state(dir, plan_, comm_->rank(), params_, make_optimizer_, *shard_);
  if (codec_hook_) {
    compression::load_codec_state(dir, codec_hook_->codec(), static_cast<int64_t>(params_.size()),
                                  comm_->rank(), comm_->size(), comm_->device());
  }
}

Stats PsCollectiveStrategy::stats() const {
  double wait_ms = 0.0;
  for (const auto& [start, end] : last_waits_) wait_ms += measured_ms(*start, *end);
  Stats stats = {{"memory/optimizer_state_mb", shard_->optimizer_state_mb()},
                 {"ps/wait_ms", wait_ms},
                 {"ps/staleness", static_cast<double>(last_staleness_)},
                 {"ps/staleness_max", static_cast<double>(max_staleness_)}};
  if (device_staleness_.defined()) {  // the versions the device chose (waits for it)
    const torch::Tensor chosen = device_staleness_.cpu();
    stats[2].value = static_cast<double>(chosen[0].item<int64_t>());
    stats[3].value = static_cast<double>(chosen[1].item<int64_t>());
  }
  if (!last_.empty()) {
    for (Stat& stat : last_.stats()) stats.push_back(std::move(stat));
  }
  if (codec_hook_) {
    for (Stat& stat : codec_hook_->stats()) stats.push_back(std::move(stat));
  }
  return stats;
}

}  // namespace dtrain::dist
