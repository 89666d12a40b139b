#include "dist/ps/peer.h"

#include "common/cuda_stream.h"
#include "common/error.h"
#include "common/host_wait.h"
#include "common/log.h"
#include "common/shared_kernels.h"
#include "dist/comm/nodes.h"
#include "dist/memory_model.h"
#include "dist/ps/whole_state.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <thread>

namespace dtrain::dist {

namespace {

// The most streams a GPU gives a hardware queue of its own (CUDA_DEVICE_MAX_CONNECTIONS).
constexpr int kHardwareQueues = 32;

// The sends of a bucket's chunks; wait() is the reducer's before the next backward writes
// the bucket.
class PushWork : public Work {
 public:
  PushWork(std::vector<std::unique_ptr<Work>> sends, std::shared_ptr<const TimePoint> when)
      : sends_(std::move(sends)), when_(std::move(when)) {}
  void wait() override {
    for (const auto& send : sends_) send->wait();
  }
  bool test() override {
    bool done = true;
    for (const auto& send : sends_) done = send->test() && done;
    return done;
  }
  std::shared_ptr<const TimePoint> started() const override { return when_; }
  std::shared_ptr<const TimePoint> finished() const override { return when_; }
  int source() const override { return -1; }

 private:
  std::vector<std::unique_ptr<Work>> sends_;
  std::shared_ptr<const TimePoint> when_;
};

}  // namespace

PsPeerStrategy::PsPeerStrategy(PsOptions options, std::shared_ptr<Communicator> world,
                               double timeout_s)
    : ReplicatedStrategy(std::move(world)), options_(std::move(options)), timeout_s_(timeout_s) {
  if (options_.placement != "colocated" || options_.consistency == "async" ||
      options_.hierarchical) {
    throw UserError(fmt::format(
        "dist.ps.transport = \"p2p\" serves colocated bsp and ssp without a hierarchy; this "
        "run has placement \"{}\", consistency \"{}\"{}: use transport \"messages\"",
        options_.placement, options_.consistency,
        options_.hierarchical ? " and hierarchical = true" : ""));
  }
  const bool ssp = options_.consistency == "ssp";
  if (ssp && (options_.ssp_reads == "exact" || options_.predict_weights)) {
    throw UserError(
        "dist.ps.transport = \"p2p\" reads the newest rounds that have arrived: ssp_reads = "
        "\"exact\" and predict_weights = true need transport \"collectives\"");
  }
  staleness_ = ssp ? options_.staleness : 0;
  const int64_t every_push = comm_->size() - 1;
  const int64_t previews =
      options_.previews == 0 ? every_push : std::min(options_.previews, every_push);
  previews_ = options_.partial_reads() && staleness_ > 0 && previews > 0;
  per_round_ = previews_ ? previews + 1 : 1;
  if (options_.p2p_links != "communicator") {
    const bool one_machine = world_on_one_machine();
    if (options_.p2p_links == "shared" && !one_machine) {
      throw UserError(
          "dist.ps.p2p_links = \"shared\" needs every rank on one machine (they map one "
          "another's memory), and MPI placed them on several: use p2p_links = \"communicator\"");
    }
    shared_links_ = one_machine && (options_.p2p_links == "shared" || comm_->device().is_cuda());
  }
  if (comm_->device().is_cuda()) {
    // Of high priority: a preview is on the path from the on-time pushes to every worker's
    // read, and its kernels would otherwise queue for SMs behind this rank's forward and
    // backward, whose kernels fill the GPU.
    server_stream_ =
        c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStreamFromGlobalPool(
            comm_->device(), /*isHighPriority=*/true);
  }
  if (comm_->device().is_cuda() && !shared_links_) {
    const int needed = 4 * (comm_->size() - 1) + 2;  // the links, compute and the server
    const char* set = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    if (needed > kHardwareQueues) {
      throw UserError(fmt::format(
          "dist.ps.transport = \"p2p\" on GPUs serves at most 8 workers (each of a GPU's "
          "{} streams needs a hardware queue of its own, of 32); this run has {}: use "
          "transport \"collectives\" or \"messages\"",
          needed, comm_->size()));
    }
    if (set == nullptr || std::atoi(set) < needed) {
      throw UserError(fmt::format(
          "dist.ps.transport = \"p2p\" on GPUs needs CUDA_DEVICE_MAX_CONNECTIONS of at least {} "
          "(a receive waiting for a peer must not hold up the work queued behind it), set "
          "before CUDA starts, as the trainer does; here it is {}",
          needed, set ? set : "unset (8)"));
    }
    const char* loading = std::getenv("CUDA_MODULE_LOADING");
    if (loading == nullptr || std::string(loading) != "EAGER") {
      throw UserError(fmt::format(
          "dist.ps.transport = \"p2p\" on GPUs needs CUDA_MODULE_LOADING=EAGER (a kernel "
          "loaded at its first launch waits for every kernel on the GPU, a receive waiting for "
          "a peer that does the same included: a deadlock), set before CUDA starts, as the "
          "trainer does; here it is {}",
          loading ? loading : "unset (LAZY)"));
    }
    // The receives posted ahead hold SMs until their peers send: no layer may take a kernel
    // that waits for every SM (cuDNN's persistent BatchNorm), from the kernels' warm-up on.
    set_standing_communication(true);
    standing_ = true;
  }
}

PsPeerStrategy::~PsPeerStrategy() {
  server_.reset();  // it holds the links too
  release_peer_links(links_, comm_->rank());
  if (standing_) set_standing_communication(false);
}

void PsPeerStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  hold(model);
  require_one_dtype(params_, names_, "ps");
  make_optimizer_ = make_optimizer;
  const int workers = comm_->size();
  const int me = comm_->rank();

  plan_ = make_ps_plan(params_, workers, options_.chunk_mb, /*keep_tensors_whole=*/false);
  if (me == 0) {
    const auto element_size = static_cast<int64_t>(params_.front().element_size());
    log::info("{} workers, {} consistency{}, over point-to-point links ({}); {}", workers,
              options_.consistency,
              staleness_ > 0 ? fmt::format(" (staleness {}, {} reads)", staleness_,
                                           options_.ssp_reads)
                             : std::string(),
              shared_links_ ? "shared memory" : comm_->backend(),
              plan_.summary(names_, element_size));
    log::debug("{}", plan_.describe(names_, element_size));
    const std::string uneven = uneven_plan_warning(plan_, options_.chunk_mb, element_size);
    if (!uneven.empty()) log::warn("{}", uneven);  // as over messages: the plan is the same
  }
  // The SSP slots, refused in one line before any is allocated where they cannot fit.
  const std::string slots_problem = ps_slots_problem(
      options_, "p2p",
      ps_slot_bytes(options_, plan_, me, static_cast<int64_t>(params_.front().element_size()),
                    comm_->device().is_cuda()),
      memory_of(comm_->device()), comm_->device().is_cuda() ? "GPU memory" : "host memory");
  if (!slots_problem.empty()) throw UserError(slots_problem);
  const PsShard::ServerSum no_sum = [](torch::Tensor) -> torch::Tensor {
    throw UserError("dist.ps.transport = \"p2p\" steps SGD only: norms over the servers "
                    "(LARS, LAMB) need transport \"collectives\"");
  };
  shard_ = std::make_unique<PsShard>(plan_, me, params_, params_.front().device(),
                                     make_optimizer, no_sum, /*whole_tensors=*/false);
  param_flat_ = move_into_buckets(params_, plan_.layout);
  ReducerOptions reducer;
  reducer.owner = "ps";
  reducer.find_unused = true;  // a parameter without gradient pushes zeros
  CommHook* hook = this;
  reducer_ = std::make_unique<GradientReducer>(params_, names_, comm_, *hook, reducer,
                                               plan_.layout);

  server_numel_ = plan_.server_numel();
  offset_in_server_.assign(plan_.chunks.size(), 0);
  for (int s = 0; s < workers; ++s) {
    int64_t offset = 0;
    for (const int64_t c : plan_.chunks_of(s)) {
      offset_in_server_[static_cast<size_t>(c)] = offset;
      offset += plan_.chunks[static_cast<size_t>(c)].numel;
    }
  }
  if (shared_links_) {
    links_ = make_shared_peer_links(*comm_, [this](int from, int to, bool pulls) {
      return ring_bytes(from, to, pulls);
    }, timeout_s_);
  } else {
    links_ = make_peer_links(*comm_, static_cast<int>(options_.link_ctas));
  }
  // A read at clock c takes a message of round c - k - 1 or newer; the receives of round c
  // are posted after it, into the slots of messages no later read can want.
  const int64_t slots = per_round_ * (staleness_ + 1);
  pull_slots_.resize(static_cast<size_t>(workers));
  pulls_.resize(static_cast<size_t>(workers));
  read_index_.assign(static_cast<size_t>(workers), -1);
  for (int s = 0; s < workers; ++s) {
    if (s == me || server_numel_[static_cast<size_t>(s)] == 0) continue;
    for (int64_t i = 0; i < slots; ++i) {
      pull_slots_[static_cast<size_t>(s)].push_back(
          torch::zeros({server_numel_[static_cast<size_t>(s)]}, param_flat_.front().options()));
    }
  }
  if (shard_->numel() > 0) {
    server_ = std::make_unique<PsPeerServer>(me, links_, *shard_, staleness_, per_round_ - 1,
                                             options_.preview_fill == "mean", timeout_s_,
                                             server_stream_);
  }
  buffer_sync_ = std::make_unique<BufferSync>(buffers_, comm_, BufferPolicy::kAverage);
}

int64_t PsPeerStrategy::ring_bytes(int from, int to, bool pulls) const {
  // Room for two steps' messages and, since a message never wraps round the ring, the
  // largest once more: a sender is held back only where a receiver has fallen two steps behind.
  const auto element_size = static_cast<int64_t>(params_.front().element_size());
  const auto rounded = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  int64_t step = 0, largest = 256;  // the links' first message, a float
  if (pulls) {
    largest = std::max(largest, rounded(server_numel_[static_cast<size_t>(from)] * element_size));
    step = per_round_ * largest;
  } else {
    for (const int64_t c : plan_.chunks_of(to)) {
      const int64_t bytes = rounded(plan_.chunks[static_cast<size_t>(c)].numel * element_size);
      step += bytes;
      largest = std::max(largest, bytes);
    }
    step += 256;  // the trailer
  }
  return 2 * step + largest;
}

torch::Tensor PsPeerStrategy::own_push() {
  if (!own_push_.defined()) own_push_ = torch::empty_like(shard_->params());
  return own_push_;
}

int64_t PsPeerStrategy::payload_bytes(const Bucket& bucket) const {
  const size_t b = plan_bucket(plan_, bucket);
  int64_t numel = 0;
  for (int64_t c = plan_.first_chunk[b]; c < plan_.first_chunk[b + 1]; ++c) {
    const PsChunk& chunk = plan_.chunks[static_cast<size_t>(c)];
    if (chunk.server != comm_->rank()) numel += chunk.numel;
  }
  return numel * static_cast<int64_t>(bucket.flat.element_size());
}

std::unique_ptr<Work> PsPeerStrategy::launch(Bucket& bucket) {
  const size_t b = plan_bucket(plan_, bucket);
  std::vector<std::unique_ptr<Work>> sends;
  torch::NoGradGuard no_grad;
  for (int64_t c = plan_.first_chunk[b]; c < plan_.first_chunk[b + 1]; ++c) {
    const PsChunk& chunk = plan_.chunks[static_cast<size_t>(c)];
    const torch::Tensor grads = bucket.flat.narrow(0, chunk.offset, chunk.numel);
    if (chunk.server == comm_->rank()) {
      shard_->chunk_of(own_push(), c).copy_(grads);
    } else {
      const PsPeerLinks& link = links_[static_cast<size_t>(chunk.server)];
      sends.push_back(link.push_out->send(grads, link.peer, kPeerLinkTag));
    }
  }
  for (const auto& send : sends) send->test();  // launches them
  return std::make_unique<PushWork>(std::move(sends), comm_->now());
}

void PsPeerStrategy::after_backward(bool last_micro_step) {
  reducer_->after_backward(last_micro_step, current_);
  if (last_micro_step) current_.set_backward_end(comm_->now());
}

void PsPeerStrategy::step(double lr) {
  reducer_->after_step();
  const int me = comm_->rank();
  const torch::Tensor trailer =
      torch::full({1}, lr, param_flat_.front().options().dtype(torch::kFloat64));
  for (int s = 0; s < comm_->size(); ++s) {
    if (s == me || server_numel_[static_cast<size_t>(s)] == 0) continue;
    const PsPeerLinks& link = links_[static_cast<size_t>(s)];
    sends_.push_back(link.push_out->send(trailer, link.peer, kPeerLinkTag));
    sends_.back()->test();
  }
  if (server_) {
    PsPeerHandoff push{clock_, own_push(), nullptr, lr};
    if (server_stream_) {
      push.ready = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
      push.ready->record(current_cuda_stream(comm_->device()));
    }
    server_->push_own(std::move(push));
    own_push_ = torch::Tensor();
  }
  // This round's messages, posted now (on NCCL after the compute issued so far, so after
  // the last read of the slots they take).
  for (int s = 0; s < comm_->size(); ++s) {
    auto& slots = pull_slots_[static_cast<size_t>(s)];
    if (slots.empty()) continue;
    const PsPeerLinks& link = links_[static_cast<size_t>(s)];
    for (int64_t i = 0; i < per_round_; ++i) {
      const int64_t index = clock_ * per_round_ + i;
      const torch::Tensor& slot = slots[static_cast<size_t>(index % static_cast<int64_t>(slots.size()))];
      pulls_[static_cast<size_t>(s)].push_back({index, link.pull_in->recv(slot, link.peer, kPeerLinkTag)});
      pulls_[static_cast<size_t>(s)].back().work->test();
    }
  }
  sends_.erase(std::remove_if(sends_.begin(), sends_.end(),
                              [](const std::unique_ptr<Work>& send) { return send->test(); }),
               sends_.end());
  ++clock_;
  end_step_record();
  last_waits_ = std::move(waits_);
  waits_.clear();
}

int64_t PsPeerStrategy::whole_round_message(int64_t clock) const {
  return clock <= 0 ? -1 : clock * per_round_ - 1;
}

void PsPeerStrategy::before_forward(int64_t step) {
  const auto start = comm_->now();
  // The first dist.ps.sync_steps steps read as BSP does: the last whole round, nothing newer.
  const bool in_sync = step < options_.sync_steps;
  const int64_t k = in_sync ? 0 : staleness_;
  if (server_stream_ && k > 0) {
    // The host chooses what to read: it must see what has arrived by the time the forward
    // runs, not when it was queued.
    wait_for_stream(comm_->device());
  }
  // The round just pushed, with every push but one in.
  if (previews_ && k > 0 && clock_ > 0) await_preview(clock_ * per_round_ - 2);
  read(whole_round_message(clock_ - k), in_sync);
  waits_.emplace_back(start, comm_->now());
  // Exposed as DDP's wait for a slow peer is.
  current_.add_wait(waits_.back().first, waits_.back().second);
  if (server_) current_.add_served(server_->take_served());
}

void PsPeerStrategy::await_preview(int64_t index) {
  const auto now = std::chrono::steady_clock::now();
  const std::optional<std::chrono::steady_clock::time_point> before = last_forward_;
  last_forward_ = now;
  if (!before || options_.partial_wait <= 0.0) return;
  const auto deadline = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  (now - *before) * options_.partial_wait);
  const auto all_in = [&] {
    for (int s = 0; s < comm_->size(); ++s) {
      if (server_numel_[static_cast<size_t>(s)] > 0 && newest_now(s) < index) return false;
    }
    return true;
  };
  while (!all_in() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

int64_t PsPeerStrategy::newest_now(int s) {
  if (s == comm_->rank()) return server_->newest_message();
  int64_t found = -1;
  for (Pull& pull : pulls_[static_cast<size_t>(s)]) {
    if (pull.work->test()) found = pull.index;
  }
  return found;
}

int64_t PsPeerStrategy::newest_arrived(int s, int64_t least) {
  std::deque<Pull>& pulls = pulls_[static_cast<size_t>(s)];
  int64_t found = newest_now(s);
  if (found < least) {
    // Another rank's server: its own worker names whom it waits for, and speaks first.
    const double limit_s = s == comm_->rank() ? timeout_s_ : 1.25 * timeout_s_;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    while ((found = newest_now(s)) < least) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw UserError(fmt::format(
            "ps: rank {} waited {} s (dist.timeout_s = {} s) for round {} from the server on "
            "rank {}, which has not sent it (a worker that stopped pushing?)",
            comm_->rank(), limit_s, timeout_s_, least / per_round_, s));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  // What is older than the message read is done with (on NCCL it has completed: in order),
  // and into the stats: every message that arrived crossed the link, read or not.
  const int64_t bytes = server_numel_[static_cast<size_t>(s)] *
                        static_cast<int64_t>(param_flat_.front().element_size());
  while (!pulls.empty() && pulls.front().index < found && pulls.front().work->test()) {
    current_.add_untimed(Collective::kRecv, Traffic::kParameters, bytes, s);
    pulls.pop_front();
  }
  return found;
}

void PsPeerStrategy::copy_in(int s, const torch::Tensor& values) {
  torch::NoGradGuard no_grad;
  for (const int64_t c : plan_.chunks_of(s)) {
    const PsChunk& chunk = plan_.chunks[static_cast<size_t>(c)];
    param_flat_[static_cast<size_t>(chunk.bucket)]
        .narrow(0, chunk.offset, chunk.numel)
        .copy_(values.narrow(0, offset_in_server_[static_cast<size_t>(c)], chunk.numel));
  }
}

void PsPeerStrategy::read(int64_t least, bool exact) {
  const int me = comm_->rank();
  int64_t oldest = std::numeric_limits<int64_t>::max();
  const int64_t workers = comm_->size();
  int64_t total = 0, partial = 0, ahead = 0;
  double missing = 0.0;  // pushes of the steps before this one not in the read, by element
  for (int s = 0; s < comm_->size(); ++s) {
    const int64_t numel = server_numel_[static_cast<size_t>(s)];
    if (numel == 0) continue;
    int64_t& held = read_index_[static_cast<size_t>(s)];
    if (s == me) {
      if (least >= 0 || (!exact && server_->newest_message() > held)) {
        const PsPeerHandoff message = server_->own_message(
            std::max(least, held), exact ? least : std::numeric_limits<int64_t>::max());
        if (message.index > held) {
          if (message.ready) {
            const c10::Stream compute = current_cuda_stream(comm_->device());
            message.ready->block(compute);
            message.values.record_stream(compute);
          }
          copy_in(s, message.values);
          held = message.index;
        }
      }
    } else {
      // Exact: nothing newer than `least` is posted yet (its round is the last one pushed), so
      // its slot still holds it.
      const int64_t found = exact ? std::min(newest_arrived(s, least), least)
                                  : newest_arrived(s, least);
      if (found > held) {
        const auto& slots = pull_slots_[static_cast<size_t>(s)];
        copy_in(s, slots[static_cast<size_t>(found % static_cast<int64_t>(slots.size()))]);
        held = found;
      }
    }
    const int64_t version = held < 0 ? 0 : held / per_round_ + 1;
    oldest = std::min(oldest, version);
    total += numel;
    if (previews_ && held >= 0 && held % per_round_ != per_round_ - 1) partial += numel;
    // A preview of this very step, which only the own server can hand over (the others'
    // receives of it are not posted yet): the others' pushes of the step this one computes.
    if (held >= 0 && held / per_round_ >= clock_) ahead += numel;
    // The pushes in message `held` by the previews' rule (dist/ps/peer_server.h): preview p
    // holds the round's first W - P + p pushes or more (pushes that arrive together share one
    // preview, sent under several numbers), so what is counted missing is an upper bound.
    int64_t pushes = 0;
    if (held >= 0) {
      const int64_t place = held % per_round_;
      pushes = held / per_round_ * workers +
               (place == per_round_ - 1 ? workers : workers - (per_round_ - 1) + place);
    }
    missing += static_cast<double>(numel) * static_cast<double>(clock_ * workers - pushes);
  }
  last_staleness_ = clock_ - oldest;
  max_staleness_ = std::max(max_staleness_, last_staleness_);
  last_partial_reads_ = total > 0 ? static_cast<double>(partial) / static_cast<double>(total) : 0.0;
  last_reads_ahead_ = total > 0 ? static_cast<double>(ahead) / static_cast<double>(total) : 0.0;
  last_shares_missing_ = total > 0 ? missing / static_cast<double>(total) : 0.0;
}

void PsPeerStrategy::sync_point() {
  // Every worker is at this clock: the newest message is the last whole round.
  read(whole_round_message(clock_));
  if (comm_->size() > 1) buffer_sync_->sync(current_);
}

void PsPeerStrategy::finish() {
  if (finished_) return;
  finished_ = true;
  sync_point();
  // Each server has posted the receives of step clock_: zeros and a NaN trailer end this
  // worker's part, and its thread ends once every worker's has.
  const int me = comm_->rank();
  const auto options = param_flat_.front().options();
  for (int s = 0; s < comm_->size(); ++s) {
    if (s == me || server_numel_[static_cast<size_t>(s)] == 0) continue;
    const PsPeerLinks& link = links_[static_cast<size_t>(s)];
    for (const int64_t c : plan_.chunks_of(s)) {
      sends_.push_back(link.push_out->send(
          torch::zeros({plan_.chunks[static_cast<size_t>(c)].numel}, options), link.peer, kPeerLinkTag));
    }
    sends_.push_back(link.push_out->send(
        torch::full({1}, std::numeric_limits<double>::quiet_NaN(), options.dtype(torch::kFloat64)),
        link.peer, kPeerLinkTag));
    sends_.back()->test();
  }
  if (server_) {
    server_->push_own({clock_, torch::Tensor(), nullptr, std::numeric_limits<double>::quiet_NaN()});
    server_->join();
  }
  // Delivered, not only queued: the caller goes on to collectives and host reads, which must
  // not hold up a send the peers still wait for.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  for (const auto& send : sends_) {
    send->wait();
    while (!send->test()) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw UserError(fmt::format("ps: rank {} could not deliver its last pushes within {} s "
                                    "(dist.timeout_s)",
                                    me, timeout_s_));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  sends_.clear();
}

NamedTensors PsPeerStrategy::model_state() {
  sync_point();
  return module_state(*model_);
}

void PsPeerStrategy::load_model_state(const NamedTensors& state) {
  copy_state(state, module_state(*model_));
  shard_->set_params(params_);
  if (server_) server_->after_caller();
}

void PsPeerStrategy::prepare_checkpoint() {
  sync_point();
  gathered_ = gather_states_on_rank0(*comm_, shard_->state());  // only rank 0 writes
}

void PsPeerStrategy::save(const std::string& dir) const {
  save_whole_state(dir, plan_, params_, names_, make_optimizer_, gathered_);
}

void PsPeerStrategy::load(const std::string& dir) {
  load_whole_state(dir, plan_, comm_->rank(), params_, make_optimizer_, *shard_);
  if (server_) server_->after_caller();
}

Stats PsPeerStrategy::stats() const {
  double wait_ms = 0.0;
  for (const auto& [start, end] : last_waits_) wait_ms += measured_ms(*start, *end);
  Stats stats = {{"memory/optimizer_state_mb", shard_->optimizer_state_mb()},
                 {"ps/wait_ms", wait_ms},
                 {"ps/staleness", static_cast<double>(last_staleness_)},
                 {"ps/staleness_max", static_cast<double>(max_staleness_)}};
  if (previews_) {
    stats.push_back({"ps/partial_reads", last_partial_reads_});
    stats.push_back({"ps/reads_ahead", last_reads_ahead_});
    stats.push_back({"ps/shares_missing", last_shares_missing_});
  }
  if (server_ && comm_->size() > 1) {
    stats.push_back({"ps/delivery_ms", server_->take_delivery_ms()});
  }
  if (!last_.empty()) {
    for (Stat& stat : last_.stats()) stats.push_back(std::move(stat));
  }
  return stats;
}

}  // namespace dtrain::dist
