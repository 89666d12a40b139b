#include "dist/ps/collective.h"

#include "common/error.h"
#include "common/log.h"
#include "dist/optimizer_state.h"
#include "dist/ps/whole_state.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

namespace dtrain::dist {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

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

// The servers' work on their stream (GPUs), after what the compute stream has issued; the
// compute stream is current again at the end of the scope.
class OnServerStream {
 public:
  OnServerStream(const std::optional<c10::Stream>& server, c10::Device device) {
    if (!server) return;
    const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    compute_ = cuda.getStream(device);
    c10::Event issued(c10::DeviceType::CUDA);
    issued.record(*compute_);
    issued.block(*server);
    cuda.exchangeStream(*server);
  }
  ~OnServerStream() {
    if (compute_) c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).exchangeStream(*compute_);
  }
  OnServerStream(const OnServerStream&) = delete;
  OnServerStream& operator=(const OnServerStream&) = delete;

 private:
  std::optional<c10::Stream> compute_;
};

c10::Stream compute_stream(c10::Device device) {
  return c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device);
}

int64_t staleness_of(const PsOptions& options) {
  return options.consistency == "ssp" ? options.staleness : 0;
}

}  // namespace

PsCollectiveStrategy::PsCollectiveStrategy(PsOptions options, std::shared_ptr<Communicator> world)
    : ReplicatedStrategy(std::move(world)), options_(std::move(options)) {
  if (options_.placement != "colocated" || options_.consistency == "async") {
    throw UserError(fmt::format(
        "dist.ps.transport = \"collectives\" serves colocated bsp and ssp only (a collective "
        "joins every worker); with placement \"{}\" and consistency \"{}\" use transport "
        "\"messages\" or \"auto\"",
        options_.placement, options_.consistency));
  }
  if (comm_->device().is_cuda()) {
    const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    server_stream_ = cuda.getStreamFromGlobalPool(comm_->device());
  } else {
    push_delay_ = std::min<int64_t>(staleness_of(options_), 1);
  }
}

void PsCollectiveStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  hold(model);
  require_one_dtype(params_, names_, "ps");
  make_optimizer_ = make_optimizer;
  const int servers = comm_->size();

  std::vector<int64_t> numels;
  for (const torch::Tensor& param : params_) numels.push_back(param.numel());
  const int64_t element_size = static_cast<int64_t>(params_.front().element_size());
  const int64_t chunk_numel =
      std::max<int64_t>(1, static_cast<int64_t>(options_.chunk_mb * kMiB) / element_size);
  plan_ = make_ps_plan(numels, servers, chunk_numel, /*keep_tensors_whole=*/false);
  if (comm_->rank() == 0) {
    const std::string described = plan_.describe(names_, element_size);
    log::info("{} workers, {} consistency{}, over collectives; {}", servers, options_.consistency,
              options_.consistency == "ssp" ? fmt::format(" (staleness {})", options_.staleness)
                                            : std::string(),
              described.substr(0, described.find("  chunk ")));
    log::debug("{}", described);
  }
  shard_ = std::make_unique<PsShard>(
      plan_, comm_->rank(), params_, params_.front().device(), make_optimizer,
      PsShard::sum_over(comm_), /*whole_tensors=*/false);

  param_flat_ = move_into_buckets(params_, plan_.layout);
  ReducerOptions reducer;
  reducer.owner = "ps";
  reducer.find_unused = true;  // a parameter without gradient pushes zeros
  reducer_ = std::make_unique<GradientReducer>(params_, names_, comm_,
                                               static_cast<CommHook&>(*this), reducer,
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
  param_slots_ = slots(server_stream_ ? k + 1 : k - push_delay_ + 1);
  if (server_stream_) {
    for (int64_t i = 0; i < grad_slots; ++i) grad_slot_read_.emplace_back(c10::DeviceType::CUDA);
  }
  buffer_sync_ = std::make_unique<BufferSync>(buffers_, comm_, BufferPolicy::kAverage);
}

std::unique_ptr<Work> PsCollectiveStrategy::launch(Bucket& bucket) {
  const auto b = static_cast<size_t>(
      std::find_if(plan_.layout.begin(), plan_.layout.end(),
                   [&](const BucketLayout& layout) { return layout == bucket.layout; }) -
      plan_.layout.begin());
  DTRAIN_CHECK(b < plan_.layout.size(), "ps: a bucket the plan does not know");
  const size_t s = static_cast<size_t>(clock_) % grad_slots_.size();
  Slot& slot = grad_slots_[s];
  const torch::Tensor& flat = slot.flat[b];
  if (!flat.is_same(bucket.flat)) {
    if (server_stream_) {  // the server stream has taken the slot's last clock
      grad_slot_read_[s].block(compute_stream(comm_->device()));
    }
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
  // The reducer's record would hold the issue moments; the reduces are recorded where their
  // clock is applied.
  StepComm issued(comm_->rank(), comm_->size());
  reducer_->after_backward(last_micro_step, issued);
  if (last_micro_step) current_.set_backward_end(comm_->now());
}

void PsCollectiveStrategy::before_forward(int64_t step) {
  (void)step;
  read(std::max(read_, clock_ - staleness_of(options_)));
  last_staleness_ = clock_ - read_;
  max_staleness_ = std::max(max_staleness_, last_staleness_);
}

void PsCollectiveStrategy::step(double lr) {
  grad_slots_[static_cast<size_t>(clock_) % grad_slots_.size()].lr = lr;
  reducer_->after_step();
  const int64_t due = clock_ - push_delay_;
  ++clock_;
  if (due >= applied_) apply(due);
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
    current_.add(Collective::kReduce, Traffic::kGradients,
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
  shard_->grads().div_(static_cast<double>(comm_->size()));
  shard_->step(grads.lr);
  ++applied_;

  Slot& out = param_slots_[static_cast<size_t>(applied_) % param_slots_.size()];
  for (auto& work : out.works) work->wait();  // a version no forward read (a sync point's skip)
  out.works.clear();
  for (const int64_t c : shard_->chunk_ids()) {
    const PsChunk& chunk = plan_.chunks[c];
    out.flat[chunk.bucket].narrow(0, chunk.offset, chunk.numel).copy_(shard_->chunk_params(c));
  }
  for (const PsChunk& chunk : plan_.chunks) {
    out.works.push_back(
        comm_->broadcast(out.flat[chunk.bucket].narrow(0, chunk.offset, chunk.numel),
                         chunk.server));
  }
}

void PsCollectiveStrategy::read(int64_t version) {
  if (version <= read_) return;
  DTRAIN_CHECK(version <= applied_, "ps: version {} read before it was issued ({})", version,
               applied_);
  Slot& in = param_slots_[static_cast<size_t>(version) % param_slots_.size()];
  const auto start = comm_->now();
  const int64_t element_size = static_cast<int64_t>(param_flat_.front().element_size());
  for (size_t c = 0; c < in.works.size(); ++c) {
    const PsChunk& chunk = plan_.chunks[c];
    in.works[c]->wait();
    current_.add(Collective::kBroadcast, Traffic::kParameters, chunk.numel * element_size,
                 std::move(in.works[c]), chunk.server);
  }
  in.works.clear();
  waits_.emplace_back(start, comm_->now());
  torch::NoGradGuard no_grad;
  for (size_t b = 0; b < param_flat_.size(); ++b) param_flat_[b].copy_(in.flat[b]);
  read_ = version;
}

void PsCollectiveStrategy::sync_point() {
  while (applied_ < clock_) apply(applied_);
  read(applied_);
  for (Slot& slot : param_slots_) {  // versions skipped: complete their broadcasts
    for (auto& work : slot.works) work->wait();
    slot.works.clear();
  }
  if (server_stream_) {  // the shard's state, read on the compute stream from here on
    c10::Event applied(c10::DeviceType::CUDA);
    applied.record(*server_stream_);
    applied.block(compute_stream(comm_->device()));
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
}

void PsCollectiveStrategy::prepare_checkpoint() {
  sync_point();
  gathered_ = gather_states_on_rank0(*comm_, shard_->state());  // only rank 0 writes
}

void PsCollectiveStrategy::save(const std::string& dir) const {
  DTRAIN_CHECK(static_cast<int>(gathered_.size()) == comm_->size(),
               "ps: save() without prepare_checkpoint() on every rank");
  save_optimizer(*whole_optimizer(plan_, params_, make_optimizer_, gathered_), dir);
  std::ofstream plan(dir + "/ps_plan.txt");
  plan << plan_.describe(names_, static_cast<int64_t>(params_.front().element_size()));
  if (!plan) throw UserError(fmt::format("{}/ps_plan.txt: cannot write", dir));
}

void PsCollectiveStrategy::load(const std::string& dir) {
  // Every rank reads the whole state and keeps its pieces.
  std::unique_ptr<torch::optim::Optimizer> whole = make_optimizer_(params_);
  load_optimizer_state(dir, params_, 0, static_cast<int64_t>(params_.size()), make_optimizer_,
                       *whole);
  shard_->load_state(server_state(plan_, comm_->rank(), params_, whole.get()));
  shard_->set_params(params_);
}

Stats PsCollectiveStrategy::stats() const {
  double wait_ms = 0.0;
  for (const auto& [start, end] : last_waits_) wait_ms += start->ms_until(*end);
  Stats stats = {{"memory/optimizer_state_mb", shard_->optimizer_state_mb()},
                 {"ps/wait_ms", wait_ms},
                 {"ps/staleness", static_cast<double>(last_staleness_)},
                 {"ps/staleness_max", static_cast<double>(max_staleness_)}};
  if (!last_.empty()) {
    for (Stat& stat : last_.stats()) stats.push_back(std::move(stat));
  }
  return stats;
}

}  // namespace dtrain::dist
