#include "dist/ps/ps.h"

#include "common/error.h"
#include "common/log.h"
#include "dist/coalesced.h"
#include "dist/comm/mpi_communicator.h"
#include "dist/placement.h"
#include "dist/ps/protocol.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <thread>

namespace dtrain::dist {

namespace {

using Clock = std::chrono::steady_clock;

Consistency consistency_of(const std::string& name) {
  if (name == "ssp") return Consistency::kSsp;
  if (name == "async") return Consistency::kAsync;
  return Consistency::kBsp;
}

}  // namespace

// A bucket's pushes, one send per chunk; with a hierarchy, first the node's reduce onto its
// leader, which then pushes the sum. Waiting polls this rank's server: its peers' pushes may
// need it to take theirs first.
class PsStrategy::PushWork : public Work {
 public:
  // `held`: the gradients on the host, which MPI reads; `reduce`: the node's reduce of
  // `held`, after which a leader pushes (none: the pushes start now).
  PushWork(PsStrategy& owner, int64_t bucket, torch::Tensor held, std::unique_ptr<Work> reduce)
      : owner_(owner), bucket_(bucket), held_(std::move(held)), reduce_(std::move(reduce)),
        started_(owner.workers_comm_->now()) {
    if (!reduce_) start_pushes();
  }

  bool test() override {
    owner_.progress();
    if (!pushing_) {
      if (!reduce_->test()) return false;
      start_pushes();
    }
    for (auto& send : sends_) {
      if (!send->test()) return false;
    }
    if (!finished_) finished_ = owner_.workers_comm_->now();
    return true;
  }
  void wait() override {
    owner_.wait_until([this] { return test(); }, [this] {
      return pushing_ ? fmt::format("pushing gradients: {} did not take them", waited_for())
                      : std::string("reducing gradients in a node: a worker did not join");
    });
  }
  std::shared_ptr<const TimePoint> started() const override { return started_; }
  std::shared_ptr<const TimePoint> finished() const override { return finished_; }
  int source() const override { return -1; }
  // The node's reduce, for the stats (complete once test() returned true).
  std::unique_ptr<Work> take_reduce() { return std::move(reduce_); }

 private:
  void start_pushes() {
    if (owner_.is_leader_) sends_ = owner_.push(bucket_, held_, messages_);
    pushing_ = true;
  }
  // The servers whose pushes are still in flight, by world rank (the sends are the bucket's
  // chunks in plan order).
  std::string waited_for() {
    std::vector<int> ranks;
    for (size_t i = 0; i < sends_.size(); ++i) {
      if (sends_[i]->test()) continue;
      const PsChunk& chunk = owner_.plan_.chunks[owner_.plan_.first_chunk[bucket_] + i];
      const int rank = owner_.server_rank(chunk.server);
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
    }
    std::sort(ranks.begin(), ranks.end());
    if (ranks.empty()) return "a server";
    return fmt::format("the server{} on rank{} {}", ranks.size() > 1 ? "s" : "",
                       ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "));
  }

  PsStrategy& owner_;
  int64_t bucket_;
  torch::Tensor held_;
  std::unique_ptr<Work> reduce_;
  bool pushing_ = false;
  std::vector<std::unique_ptr<Work>> sends_;
  std::vector<torch::Tensor> messages_;  // encoded pushes: MPI reads them until sent
  std::shared_ptr<const TimePoint> started_, finished_;
};

PsStrategy::PsStrategy(PsOptions options, std::shared_ptr<Communicator> world, double timeout_s,
                       CompressionOptions compression)
    : options_(std::move(options)),
      compression_(std::move(compression)),
      consistency_(consistency_of(options_.consistency)),
      world_(std::move(world)),
      timeout_s_(timeout_s),
      current_(0, 1),
      last_(0, 1) {
  const std::string refused = compressed_messages_error(compression_, options_);
  if (!refused.empty()) throw UserError("dist.compression.kind: " + refused);
  // Roles come from the whole world, of which world_ may be a part (the workers' GPUs).
  const std::unique_ptr<Communicator> mpi_world = make_mpi_world(timeout_s_);
  const int ranks = mpi_world->size();
  const int rank = mpi_world->rank();
  const bool dedicated = options_.placement == "dedicated";
  const RankPlacement placement = place_ps_ranks(options_, ranks);
  num_workers_ = placement.num_device_ranks;
  num_servers_ = dedicated ? ranks - num_workers_ : ranks;
  is_worker_ = !placement.host_only(rank);
  worker_index_ = is_worker_ ? rank : 0;
  if (is_worker_ && world_->device().is_cuda()) {
    // NCCL over every rank would need a GPU on each server too.
    DTRAIN_CHECK(world_->size() == num_workers_,
                 "ps: the workers' {} communicator spans {} rank(s), and there are {} workers; "
                 "build it over the workers only (dist/placement.h, make_device_communicator)",
                 world_->backend(), world_->size(), num_workers_);
  }
  DTRAIN_CHECK(is_worker_ || world_->device().is_cpu(),
               "ps: dedicated server rank {} runs on the CPU (dist/placement.h), but was given "
               "a communicator on {}",
               rank, world_->device().str());
  if (options_.hierarchical && !world_->device().is_cpu()) {
    // Written for GPU workers (host copies), not yet run on GPUs; there the collective
    // transport sums on the links anyway.
    throw UserError("dist.ps.hierarchical = true runs on CPU ranks only in this version; on "
                    "GPUs use dist.ps.transport = \"collectives\", whose reduces sum on the "
                    "links");
  }
  if (options_.tolerate_worker_loss && !world_survives_rank_loss()) {
    throw UserError("dist.ps.tolerate_worker_loss = true needs mpirun --enable-recovery (or "
                    "OMPI_MCA_orte_enable_recovery=1): without it mpirun ends the whole job when "
                    "one rank dies");
  }
  if (options_.tolerate_worker_loss && rank == 0 && std::getenv("DTRAIN_EXIT_CODES") == nullptr) {
    log::warn("mpirun --enable-recovery exits 0 whatever its ranks' exit codes: launch with "
              "scripts/mpirun.sh, which exits with the largest, or check the run's final record");
  }
  const bool is_server = !dedicated || !is_worker_;
  requests_ = mpi_world->dup();
  replies_ = mpi_world->dup();
  workers_comm_ = mpi_world->split(is_worker_ ? 0 : 1, rank);
  for (int w = 0; w < num_workers_; ++w) live_workers_.push_back(w);
  if (options_.hierarchical) {
    if (consistency_ == Consistency::kAsync) {
      throw UserError("dist.ps.hierarchical = true is not available with consistency \"async\" "
                      "(a leader's push is its whole node's); use \"bsp\" or \"ssp\"");
    }
    hierarchy_ = std::make_unique<PsHierarchy>(*mpi_world, num_workers_);
    is_leader_ = hierarchy_->is_leader();
  }
  std::shared_ptr<Communicator> servers = mpi_world->split(is_server ? 0 : 1, rank);
  // SyncBatchNorm's group: the workers on their device, where world_ spans them alone.
  data_comm_ = world_->device().is_cpu() ? workers_comm_ : world_;
  if (is_server) {
    // The server's setup is finished in attach(), which knows the model.
    PsServerSetup setup;
    setup.index = dedicated ? rank - num_workers_ : rank;
    if (hierarchy_) {
      setup.worker_ranks = hierarchy_->leaders();
    } else {
      for (int w = 0; w < num_workers_; ++w) setup.worker_ranks.push_back(w);
    }
    setup.num_workers = num_workers_;
    setup.consistency = consistency_;
    setup.requests = requests_;
    setup.replies = replies_;
    setup.servers = servers;
    setup.timeout_s = timeout_s_;
    setup.tolerate_worker_loss = options_.tolerate_worker_loss;
    setup.encoded_pushes = compression_.enabled();
    // At staleness 0 a round in progress is never due: a worker that read one (a straggler
    // finding the others' pushes of its own step) would leave BSP's steps.
    setup.partial_rounds = options_.partial_reads() && options_.staleness > 0;
    setup.fill_with_mean = options_.preview_fill == "mean";
    for (int s = 0; s < num_servers_; ++s) setup.server_ranks.push_back(server_rank(s));
    server_setup_ = std::move(setup);
  }
  current_ = StepComm(requests_->rank(), requests_->size(), requests_->now());
}

PsStrategy::~PsStrategy() {
  if (units_) units_->set_unit_hooks(nullptr);
}

DataGroup PsStrategy::data_group() const {
  if (!is_worker_) return {0, 0, nullptr};
  return {worker_index_, num_workers_, data_comm_};
}

int PsStrategy::server_rank(int server) const {
  return options_.placement == "dedicated" ? num_workers_ + server : server;
}

void PsStrategy::serve() { server_->serve(); }

int PsStrategy::num_leaders() const {
  return hierarchy_ ? static_cast<int>(hierarchy_->leaders().size()) : num_workers_;
}

void PsStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  model_ = &model;
  make_optimizer_ = make_optimizer;
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    names_.push_back(item.key());
    params_.push_back(item.value());
  }
  buffers_ = model.buffers();
  require_one_dtype(params_, names_, "ps");
  broadcast_rank0_model();

  const int64_t element_size = static_cast<int64_t>(params_.front().element_size());
  // Async servers apply pushes independently: each computes its tensors' norms alone.
  plan_ = make_ps_plan(params_, num_servers_, options_.chunk_mb,
                       consistency_ == Consistency::kAsync);
  const std::string described = plan_.describe(names_, element_size);
  if (requests_->rank() == 0) {
    const size_t summary_end = described.find("  chunk ");
    log::info("{} workers, {} consistency{}{}; {}", num_workers_, options_.consistency,
              consistency_ == Consistency::kSsp
                  ? fmt::format(" (staleness {})", options_.staleness)
                  : std::string(),
              hierarchy_ ? ", " + hierarchy_->describe() : std::string(),
              described.substr(0, summary_end == std::string::npos ? described.size()
                                                                   : summary_end));
    log::debug("{}", described);
    const std::string uneven = uneven_plan_warning(plan_, options_.chunk_mb, element_size);
    if (!uneven.empty()) log::warn("{}", uneven);
  }

  if (server_setup_) {
    server_setup_->plan = &plan_;
    server_ = std::make_unique<PsServer>(*server_setup_, params_, names_, make_optimizer_);
  }
  if (!is_worker_) return;

  const size_t chunks = plan_.chunks.size();
  version_.assign(chunks, 0);
  received_.assign(chunks, 0);
  receiving_.resize(chunks);
  expected_.assign(chunks, 0);
  read_version_.assign(chunks, 0);
  partial_.assign(chunks, false);
  if (compression_.enabled()) {
    std::vector<int64_t> numels;
    for (const torch::Tensor& param : params_) numels.push_back(param.numel());
    encoder_ = std::make_unique<ps::PushEncoder>(compression_, numels);
    pushed_bytes_.assign(plan_.layout.size(), 0);
  }
  bucket_of_first_param_.assign(params_.size(), -1);
  param_flat_ = move_into_buckets(params_, plan_.layout);
  for (size_t b = 0; b < plan_.layout.size(); ++b) {
    const BucketLayout& bucket = plan_.layout[b];
    bucket_of_first_param_[bucket.params.front()] = static_cast<int64_t>(b);
    if (hierarchy_) {
      node_grads_.push_back(
          torch::empty({bucket.numel}, param_flat_[b].options().device(torch::kCPU)));
    }
  }
  ReducerOptions reducer;
  reducer.owner = "ps";
  reducer.find_unused = true;  // a parameter without gradient pushes zeros
  reducer_ = std::make_unique<GradientReducer>(params_, names_, workers_comm_,
                                               static_cast<CommHook&>(*this), reducer,
                                               plan_.layout);
  units_ = dynamic_cast<UnitModule*>(&model);
  if (units_) units_->set_unit_hooks(&forward_progress_);
}

void PsStrategy::broadcast_rank0_model() {
  std::vector<torch::Tensor> state = params_;
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  torch::NoGradGuard no_grad;
  if (options_.placement != "dedicated") {  // every rank a worker, on world_'s device
    if (world_->size() > 1) broadcast_coalesced(*world_, state, 0);
    return;
  }
  // Dedicated servers hold no device: through the host, over MPI (no message is in flight
  // yet). Host copies of a GPU worker's tensors; a CPU rank's tensors themselves.
  std::vector<torch::Tensor> host;
  for (const torch::Tensor& tensor : state) host.push_back(tensor.to(torch::kCPU));
  broadcast_coalesced(*requests_, host, 0);
  for (size_t i = 0; i < state.size(); ++i) {
    if (!state[i].is_cpu()) state[i].copy_(host[i]);
  }
}

void PsStrategy::poll_server() {
  if (server_) server_->poll();
}

void PsStrategy::progress() {
  poll_server();
  receive_params();
}

void PsStrategy::wait_until(const std::function<bool()>& done,
                            const std::function<std::string()>& what, double limit_s) {
  const auto start = Clock::now();
  if (limit_s <= 0.0) limit_s = timeout_s_;
  const auto deadline = start + std::chrono::duration<double>(limit_s);
  for (int polls = 0; !done(); ++polls) {
    progress();
    const auto now = Clock::now();
    if (now > deadline) {
      log::error("rank {}: ps: {} within {} s (dist.timeout_s = {} s); ending the job",
                 error_rank(), what(), limit_s, timeout_s_);
      abort_world(3);
    }
    // A message of many fragments needs both sides in MPI: keep polling, but yield the core
    // to ranks that compute (oversubscribed CPU ranks); a long wait sleeps.
    if (now - start > std::chrono::milliseconds(20)) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    } else if (polls > 100) {
      std::this_thread::yield();
    }
  }
}

void PsStrategy::wait_workers(Work& work, const std::string& what) {
  // Without a server here to poll, the communicator's own wait names the workers missing.
  if (server_) {
    wait_polling(work, what);
  } else {
    work.wait();
  }
}

void PsStrategy::wait_polling(Work& work, const std::string& what) {
  wait_until([&work] { return work.test(); }, [&what] { return what; });
}

void PsStrategy::reduce_metrics(torch::Tensor values, ReduceOp op) {
  if (num_workers_ == 1) return;
  torch::Tensor host = values.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous();
  const int summed = sum_over_workers(host, "reducing metrics: a worker did not join");
  if (op == ReduceOp::kAverage) host.div_(summed);
  values.copy_(host);
}

int PsStrategy::sum_over_workers(torch::Tensor host, const std::string& what) {
  if (!options_.tolerate_worker_loss) {
    std::unique_ptr<Work> work = workers_comm_->all_reduce(host, ReduceOp::kSum);
    wait_workers(*work, what);
    return workers_comm_->size();
  }
  // A collective that a worker dies in never completes (no ULFM), and its survivors cannot
  // agree on whether it did: the sum goes through server 0 with the roll call instead, and
  // its answer (who trains on, and their sum) is one and the same for every survivor.
  torch::Tensor part = host.to(torch::kFloat64).flatten().contiguous();
  std::unique_ptr<Work> sent = requests_->send(part, server_rank(0), ps::kMembershipTag);
  std::optional<Envelope> envelope;
  // Server 0 answers within dist.timeout_s of the last word of a lost worker, which may
  // come just before this call: twice the timeout.
  wait_until(
      [&] { return (envelope = replies_->iprobe(server_rank(0), ps::kMembershipTag)).has_value(); },
      [&what] { return what + " (server 0 did not answer the roll call)"; }, 2 * timeout_s_);
  torch::Tensor answer = torch::empty({num_workers_ + part.numel()}, torch::kFloat64);
  wait_polling(*replies_->recv_probed(*envelope, answer), "receiving the roll call's answer");
  wait_polling(*sent, "calling the roll");
  std::vector<int> live;
  for (int w = 0; w < num_workers_; ++w) {
    if (answer[w].item<double>() != 0.0) live.push_back(w);
  }
  if (std::find(live.begin(), live.end(), worker_index_) == live.end()) {
    // Alive but too late: the servers have dropped this worker and the others went on.
    log::error("rank {}: ps: server 0 took this worker as lost (silent for dist.timeout_s = {} "
               "s); it leaves the job",
               error_rank(), timeout_s_);
    std::_Exit(3);
  }
  if (live != live_workers_ && worker_index_ == live.front()) {
    std::string lost;
    for (const int w : live_workers_) {
      if (std::find(live.begin(), live.end(), w) != live.end()) continue;
      lost += fmt::format("{}{}", lost.empty() ? "" : ", ", w);
    }
    log::warn("ps: worker rank(s) {} lost; {} of {} workers train on (their shards of the "
              "training and test data are no longer seen)",
              lost, live.size(), num_workers_);
  }
  live_workers_ = live;
  host.copy_(answer.narrow(0, num_workers_, part.numel()).view(host.sizes()));
  return static_cast<int>(live.size());
}

std::unique_ptr<Work> PsStrategy::launch(Bucket& bucket) {
  const int64_t b = bucket_of_first_param_.at(bucket.layout.params.front());
  if (hierarchy_) {
    // A copy of its own: the leader's is overwritten with the node's sum.
    node_grads_[b].copy_(bucket.flat);
    return std::make_unique<PushWork>(*this, b, node_grads_[b], hierarchy_->reduce(node_grads_[b]));
  }
  // A codec encodes on the gradients' device and copies only its messages to the host.
  const bool on_host = encoder_ || bucket.flat.device().is_cpu();
  return std::make_unique<PushWork>(*this, b, on_host ? bucket.flat : bucket.flat.cpu(), nullptr);
}

std::vector<std::unique_ptr<Work>> PsStrategy::push(int64_t b, const torch::Tensor& grads,
                                                    std::vector<torch::Tensor>& messages) {
  const int64_t first = plan_.first_chunk[b];
  const int64_t end = plan_.first_chunk[b + 1];
  if (encoder_) {
    std::vector<compression::Range> ranges;
    for (int64_t c = first; c < end; ++c) {
      ranges.push_back({plan_.chunks[c].offset, plan_.chunks[c].numel});
    }
    messages = encoder_->encode(b, plan_.layout[b], grads, ranges, step_);
    pushed_bytes_[b] = 0;
    for (const torch::Tensor& message : messages) pushed_bytes_[b] += message.numel();
  }
  std::vector<std::unique_ptr<Work>> sends;
  if (sent_bytes_.size() != plan_.layout.size()) sent_bytes_.assign(plan_.layout.size(), 0);
  sent_bytes_[b] = 0;
  for (int64_t c = first; c < end; ++c) {
    const PsChunk& chunk = plan_.chunks[c];
    const torch::Tensor message = encoder_ ? messages[static_cast<size_t>(c - first)]
                                           : grads.narrow(0, chunk.offset, chunk.numel);
    if (server_rank(chunk.server) != requests_->rank()) {
      sent_bytes_[b] += static_cast<int64_t>(message.nbytes());
    }
    sends.push_back(requests_->send(message, server_rank(chunk.server), ps::push_tag(c)));
    if (consistency_ == Consistency::kAsync) ++expected_[c];
  }
  return sends;
}

int64_t PsStrategy::payload_bytes(const Bucket& bucket) const {
  if (!encoder_) return CommHook::payload_bytes(bucket);
  const int64_t b = bucket_of_first_param_.at(bucket.layout.params.front());
  return pushed_bytes_.at(static_cast<size_t>(b));
}

void PsStrategy::record(Bucket& bucket, std::unique_ptr<Work> work, StepComm& into) {
  if (hierarchy_) {  // the node's reduce is of the dense gradients
    std::unique_ptr<Work> reduce = static_cast<PushWork&>(*work).take_reduce();
    reduce->wait();  // returns at once: the push's test() saw it complete
    hierarchy_->record_reduce(std::move(reduce), CommHook::payload_bytes(bucket), into);
    if (!is_leader_) return;
  }
  const int64_t b = bucket_of_first_param_.at(bucket.layout.params.front());
  into.add(Collective::kSend, Traffic::kGradients, sent_bytes_.at(static_cast<size_t>(b)),
           std::move(work));
}

void PsStrategy::receive_params() {
  if (!is_leader_) return;  // the servers send to the leaders
  const int64_t header = ps::header_numel(params_.front().scalar_type());
  for (size_t c = 0; c < receiving_.size(); ++c) {
    Receiving& in = receiving_[c];
    const PsChunk& where = plan_.chunks[c];
    for (;;) {
      if (!in.next.work) {
        std::optional<Envelope> envelope = replies_->iprobe(
            server_rank(where.server), ps::params_tag(static_cast<int64_t>(c)));
        if (!envelope) break;
        in.next.data = torch::empty({header + where.numel},
                                    params_.front().options().device(torch::kCPU));
        in.next.work = replies_->recv_probed(*envelope, in.next.data);
      }
      // Never waited for: the sending server's rank may be computing; the message moves
      // when that rank next polls.
      if (!in.next.work->test()) break;
      in.arrived.push_back(std::move(in.next));
      in.next = Message();
    }
  }
}

void PsStrategy::apply_params(int64_t chunk) {
  const PsChunk& where = plan_.chunks[chunk];
  std::deque<Message>& arrived = receiving_[chunk].arrived;
  for (; !arrived.empty(); arrived.pop_front()) {
    Message& message = arrived.front();
    const int64_t header = ps::header_numel(message.data.scalar_type());
    const int64_t version = ps::read_version(message.data);
    if (consistency_ == Consistency::kAsync && received_[chunk] < expected_[chunk]) {
      // An answer to a push made from version read_version_: the pushes applied in between
      // were other workers'.
      staleness_ = std::max(staleness_, version - 1 - read_version_[chunk]);
    }
    ++received_[chunk];
    version_[chunk] = version;
    partial_[chunk] = ps::is_partial(message.data);
    {
      torch::NoGradGuard no_grad;
      param_flat_[where.bucket].narrow(0, where.offset, where.numel)
          .copy_(message.data.narrow(0, header, where.numel));
    }
    if (server_rank(where.server) == replies_->rank()) continue;  // from this rank's server
    // Received while polled, mostly behind compute: what the step waited for is its wait.
    current_.add_pipelined(Collective::kRecv, Traffic::kParameters,
                 where.numel * static_cast<int64_t>(message.data.element_size()),
                 std::move(message.work), server_rank(where.server));
  }
}

void PsStrategy::apply_all_params() {
  receive_params();
  for (size_t c = 0; c < receiving_.size(); ++c) apply_params(static_cast<int64_t>(c));
}

void PsStrategy::send_control(int server, int64_t command, double value) {
  const ps::Control control{static_cast<ps::Command>(command), clock_, value};
  torch::Tensor message = control.encode();
  control_sends_.push_back(requests_->send(message, server_rank(server), ps::kControlTag));
  control_messages_.push_back(message);
}

void PsStrategy::before_forward(int64_t step) {
  step_ = step;
  if (first_forward_) {
    commit_load();
    first_forward_ = false;
  }
  const auto start = Clock::now();
  const std::shared_ptr<const TimePoint> waited_from = requests_->now();
  // The freshest parameters that have arrived, then a wait for what the consistency requires.
  const int64_t required = consistency_ == Consistency::kBsp   ? clock_
                           : consistency_ == Consistency::kSsp ? clock_ - options_.staleness
                                                               : 0;
  if (is_leader_) {  // a hierarchy's other workers take their leader's in share_params()
    apply_all_params();
    for (size_t c = 0; c < plan_.chunks.size(); ++c) {
      const int server = plan_.chunks[c].server;
      const bool own = server_ && server_->index() == server;
      // The server's own worker, or a dedicated server itself, names the rank the server
      // waits for, which is often not the server's: the other workers give them the first word.
      wait_until(
          [&, c] {
            apply_params(static_cast<int64_t>(c));
            return consistency_ == Consistency::kAsync ? received_[c] >= expected_[c]
                                                       : version_[c] >= required;
          },
          [&, c] {
            const std::string owing = own ? server_->owing_ranks() : std::string();
            return fmt::format("worker {} at step {} waited for chunk {} from server {} (rank "
                               "{}{})",
                               worker_index_, clock_, c, server, server_rank(server),
                               owing.empty() ? "" : ", without the push of worker rank(s) " + owing);
          },
          own ? timeout_s_ : 1.25 * timeout_s_);
    }
  }
  if (server_) {
    // Without a single-copy transport, a large message moves only while both ends are in MPI:
    // finish this server's sends before computing, while their receivers wait for them (every
    // wait receives) or poll often (before each unit's forward, in backward's hooks, in a
    // straggler's pause), rather than leave them stalled until this worker's next poll.
    wait_until([&] { return server_->sent(); },
               [] { return std::string("a worker did not take its parameters"); });
    apply_all_params();
    current_.add_served(server_->take_served());
  }
  // Exposed as DDP's wait for a slow peer is; a hierarchy's broadcasts below are exposed as
  // blocking operations.
  current_.add_wait(waited_from, requests_->now());
  share_params();
  wait_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (consistency_ != Consistency::kAsync) {
    const int64_t oldest = *std::min_element(version_.begin(), version_.end());
    staleness_ = clock_ - oldest;
  }
  read_version_ = version_;
  partial_reads_ = std::max(partial_reads_, static_cast<double>(std::count(
                                                partial_.begin(), partial_.end(), true)) /
                                                static_cast<double>(partial_.size()));
}

void PsStrategy::before_backward(bool last_micro_step) {
  reducer_->before_backward(last_micro_step);
}

void PsStrategy::after_backward(bool last_micro_step) {
  reducer_->after_backward(last_micro_step, current_);
}

void PsStrategy::step(double lr) {
  for (int s = 0; s < num_servers_ && is_leader_; ++s) {
    send_control(s, static_cast<int64_t>(ps::Command::kStep), lr);
  }
  reducer_->after_step();
  if (encoder_) encoder_->end_step();
  if (server_) last_decode_ms_ = server_->take_decode_ms();
  ++clock_;
  // The control messages are small: sent by now or soon; keep those still in flight.
  for (size_t i = 0; i < control_sends_.size();) {
    if (control_sends_[i]->test()) {
      control_sends_.erase(control_sends_.begin() + static_cast<int64_t>(i));
      control_messages_.erase(control_messages_.begin() + static_cast<int64_t>(i));
    } else {
      ++i;
    }
  }
  poll_server();
  last_ = std::move(current_);
  current_ = StepComm(requests_->rank(), requests_->size(), requests_->now());
  last_wait_ms_ = wait_ms_;
  wait_ms_ = 0.0;
  last_staleness_ = staleness_;
  max_staleness_ = std::max(max_staleness_, staleness_);
  last_partial_reads_ = partial_reads_;
  partial_reads_ = 0.0;
  if (consistency_ == Consistency::kAsync) staleness_ = 0;
}

void PsStrategy::barrier_polling() {
  if (num_workers_ == 1) return;
  torch::Tensor token = torch::zeros({1}, torch::kFloat32);
  sum_over_workers(token, "at a barrier of the workers: a worker did not join");
}

void PsStrategy::sync_point() {
  if (!is_worker_) return;
  commit_load();
  const size_t chunks = plan_.chunks.size();
  const auto all_fresh = [&] {
    apply_all_params();
    for (size_t c = 0; c < chunks; ++c) {
      const bool fresh = consistency_ == Consistency::kAsync ? received_[c] >= expected_[c]
                                                             : version_[c] >= clock_;
      if (!fresh) return false;
    }
    return true;
  };
  const auto what = [&] {
    return fmt::format("worker {} waited for every update of step {}", worker_index_, clock_);
  };
  if (is_leader_) wait_until(all_fresh, what);
  if (consistency_ == Consistency::kAsync) {
    // Every worker's last push has been applied once all are here: pull the result.
    barrier_polling();
    for (int s = 0; s < num_servers_; ++s) send_control(s, static_cast<int64_t>(ps::Command::kPull));
    for (size_t c = 0; c < chunks; ++c) ++expected_[c];
    wait_until(all_fresh, what);
  }
  share_params();
  // Until every worker is here, a server may still owe a worker its chunks.
  barrier_polling();
  average_buffers();
}

void PsStrategy::share_params() {
  if (!hierarchy_) return;
  hierarchy_->share(
      param_flat_, version_,
      [this](Work& work, const std::string& what) { wait_polling(work, what); }, current_);
}

void PsStrategy::average_buffers() {
  if (num_workers_ == 1) return;
  torch::NoGradGuard no_grad;
  for (torch::Tensor& buffer : buffers_) {
    if (!buffer.is_floating_point()) continue;  // BatchNorm's step count: the same everywhere
    torch::Tensor host = buffer.to(torch::kCPU, false, true).contiguous();
    const int summed =
        sum_over_workers(host, "averaging BatchNorm statistics: a worker did not join");
    buffer.copy_(host.div_(summed));
  }
}

void PsStrategy::finish() {
  if (!is_worker_) return;
  sync_point();
  for (int s = 0; s < num_servers_ && is_leader_; ++s) {
    send_control(s, static_cast<int64_t>(ps::Command::kDone));
  }
  wait_until(
      [&] {
        for (auto& send : control_sends_) {
          if (!send->test()) return false;
        }
        return !server_ || server_->finished();
      },
      [] { return std::string("finishing: a server did not hear from every worker"); });
  control_sends_.clear();
  control_messages_.clear();
}

void PsStrategy::pause(double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    poll_server();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

Stats PsStrategy::stats() const {
  Stats stats = {{"memory/optimizer_state_mb", server_ ? server_->optimizer_state_mb() : 0.0},
                 {"ps/wait_ms", last_wait_ms_},
                 {"ps/staleness", static_cast<double>(last_staleness_)},
                 {"ps/staleness_max", static_cast<double>(max_staleness_)}};
  if (options_.tolerate_worker_loss) {
    stats.push_back({"ps/workers", static_cast<double>(live_workers_.size())});
  }
  if (options_.partial_reads()) stats.push_back({"ps/partial_reads", last_partial_reads_});
  if (!last_.empty()) {
    for (Stat& stat : last_.stats()) stats.push_back(std::move(stat));
  }
  if (encoder_) {
    for (Stat& stat : encoder_->stats()) stats.push_back(std::move(stat));
    stats.push_back({"comm/decode_ms", last_decode_ms_});  // by this rank's server, if any
  }
  return stats;
}

}  // namespace dtrain::dist
