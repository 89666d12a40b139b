#include "dist/comm/shared_link.h"

#include "common/error.h"
#include "common/log.h"
#include "common/thread_stacks.h"
#include "dist/comm/mpi_communicator.h"
#include "dist/comm/mpi_work.h"
#include "dist/comm/shared_regions.h"
#if DTRAIN_CUDA
#include "dist/comm/cuda_ipc.h"
#endif

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace dtrain::dist {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kAlign = 256;         // of every message in a ring
constexpr uint64_t kDescriptors = 256;  // messages a ring holds at most
// How long the progress thread sleeps once idle: on GPUs it polls the copies' events; on CPU
// ranks it is a backstop (SharedLinkEngine::run).
constexpr std::chrono::microseconds kGpuPoll(20);
constexpr std::chrono::microseconds kCpuPoll(1000);

struct Descriptor {
  uint64_t offset = 0;  // in the ring
  uint64_t bytes = 0;
  uint64_t end = 0;  // the ring position after it, its padding included
};

// One link's control words, in the receiver's host region. Each field has one writer; the
// counters are released after what they announce is written. Zeroed memory is their start.
struct LinkControl {
  alignas(64) std::atomic<uint64_t> published;  // sender: messages complete in the ring
  alignas(64) std::atomic<uint64_t> consumed;   // receiver: messages copied out
  std::atomic<uint64_t> freed;                  // receiver: ring positions given back
  Descriptor descriptors[kDescriptors];         // sender: message i at [i % kDescriptors]
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "control words cross processes");

// The head of each rank's host region.
struct RankControl {
  // Set by a rank that found a link stuck, so that every rank's progress thread writes where
  // its threads sit before the job ends: a hang across processes is understood only from both
  // sides. 1 + that rank; 0: none.
  alignas(64) std::atomic<int> stuck;
  // CPU ranks: bumped (and its sleepers woken, a futex across processes) whenever something
  // this rank's links wait for happens: a message published to it, ring space freed for it,
  // an operation of it completed or posted. A thread of this rank waiting for an operation
  // sleeps on it instead of polling, which took a core's share from the compute on a
  // machine whose cores all compute.
  alignas(64) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> sleepers;  // threads asleep on it: a ring with none makes no call
};
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex word");
static_assert(sizeof(RankControl) <= 256, "the head fits its aligned slot");

int64_t round_up(int64_t bytes, int64_t to) { return (bytes + to - 1) / to * to; }

// Rings `rank`'s doorbell: whoever sleeps on it wakes. The bell is bumped before the
// sleepers are counted, and a sleeper is counted before it reads the bell (both sequentially
// consistent): either the ringer sees the sleeper, or the sleeper sees the new value.
void ring(RankControl& rank) {
  rank.doorbell.fetch_add(1);
  if (rank.sleepers.load() == 0) return;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&rank.doorbell), FUTEX_WAKE, INT_MAX, nullptr,
          nullptr, 0);
}

// Sleeps while `rank`'s doorbell still reads `seen`, at most `most`.
void sleep_on(RankControl& rank, uint32_t seen, std::chrono::microseconds most) {
  const timespec timeout{static_cast<time_t>(most.count() / 1000000),
                         static_cast<long>(most.count() % 1000000) * 1000};
  rank.sleepers.fetch_add(1);
  if (rank.doorbell.load() == seen) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&rank.doorbell), FUTEX_WAIT, seen, &timeout,
            nullptr, 0);
  }
  rank.sleepers.fetch_sub(1);
}

enum Stage : int { kPosted, kIssued, kComplete };

struct Op {
  torch::Tensor tensor;  // kept alive until the copy has completed
  void* data = nullptr;
  int64_t bytes = 0;
  uint64_t number = 0;  // the message's on its link
  std::optional<c10::Event> ready;  // GPUs: the caller's stream when posted
  std::optional<c10::Event> done;   // GPUs: the copy
  uint64_t offset = 0, end = 0;     // in the ring
  Clock::time_point posted_at;
  std::atomic<int> stage{kPosted};
};

// This rank's end of one link.
struct LinkEnd {
  bool sends = false;
  int peer = 0;  // in the communicator given to make_shared_links
  LinkControl* control = nullptr;
  uint8_t* ring = nullptr;
  int64_t capacity = 0;
  std::optional<c10::Stream> stream;  // GPUs: own_stream's
#if DTRAIN_CUDA
  std::unique_ptr<OwnStream> own_stream;
#endif

  std::mutex mutex;  // ops and posted: the caller against the progress thread
  std::deque<std::shared_ptr<Op>> ops;  // not yet complete, in order
  uint64_t posted = 0;
  // The progress thread's own.
  uint64_t issued = 0;
  uint64_t head = 0;  // sender: the ring position of the next message
};

class SharedLinkEngine {
 public:
  SharedLinkEngine(Communicator& comm, const std::vector<SharedLinkSpec>& specs,
                   double timeout_s);
  ~SharedLinkEngine();
  SharedLinkEngine(const SharedLinkEngine&) = delete;
  SharedLinkEngine& operator=(const SharedLinkEngine&) = delete;

  torch::Device device() const { return device_; }
  int rank() const { return rank_; }
  double timeout_s() const { return timeout_s_; }
  LinkEnd* end(size_t index) const { return ends_[index].get(); }
  std::shared_ptr<Op> post(LinkEnd& end, const torch::Tensor& tensor);
  // Moves every link along that no other thread is moving now; whether anything moved. Run by
  // the progress thread, and by a caller that waits or tests: on a machine whose cores all
  // compute, the thread that waits need not wait for the progress thread to be scheduled.
  bool progress();
  // Nothing moved: on CPU ranks sleeps until this rank's doorbell rings (or `most` passes); on
  // GPUs, whose copies complete with no one to ring, for a short poll interval.
  void idle(std::chrono::microseconds most);

 private:
  void run();
  // With the end's mutex held.
  bool advance_send(LinkEnd& end);
  bool advance_recv(LinkEnd& end);
  // Issues a copy of `bytes` on `end`'s stream once `op` is ready (GPUs), at once on CPUs.
  void copy(LinkEnd& end, Op& op, void* dst, const void* src, int64_t bytes);
  bool copied(const Op& op) const { return !op.done || op.done->query(); }
  // Completes the issued operations at the front whose copies have completed, in order, each
  // announced to the peer first (`announce`); whether any was.
  template <typename Announce>
  bool complete_copied(LinkEnd& end, const Announce& announce) const;
  void check_deadlines();
  // Another rank found a link stuck: this rank's threads into its log, once.
  void report_if_alarmed();
  RankControl& head(int rank) const {
    return *static_cast<RankControl*>(control_->region(rank).data_ptr());
  }
  // CPU ranks: rings the doorbells of this rank and of `peer`, after an operation of theirs
  // completed (so a message published, or ring space freed).
  void ring_after_completing(int peer) const;
  [[noreturn]] void fail(const std::string& what) const;

  torch::Device device_;
  int rank_;
  double timeout_s_;
  std::unique_ptr<SharedRegions> control_;
  std::unique_ptr<SharedRegions> data_;
  std::vector<std::unique_ptr<LinkEnd>> ends_;  // by spec; null where not this rank's
  int ranks_ = 0;
  bool reported_ = false;  // the progress thread's
  std::atomic<bool> stopping_{false};
  std::thread thread_;  // last: started once everything it reads exists
};

SharedLinkEngine::SharedLinkEngine(Communicator& comm, const std::vector<SharedLinkSpec>& specs,
                                   double timeout_s)
    : device_(comm.device()), rank_(comm.rank()), timeout_s_(timeout_s), ranks_(comm.size()) {
  const int n = comm.size();
  // Each rank's region holds its RankControl, then the links that end there, in the order of
  // `specs`.
  std::vector<int64_t> control_used(static_cast<size_t>(n), kAlign);
  std::vector<int64_t> data_used(static_cast<size_t>(n), 0);
  std::vector<int64_t> control_at, data_at;
  for (const SharedLinkSpec& spec : specs) {
    DTRAIN_CHECK(spec.from >= 0 && spec.from < n && spec.to >= 0 && spec.to < n &&
                     spec.from != spec.to && spec.capacity > 0,
                 "shared link from {} to {} of {} bytes among {} ranks", spec.from, spec.to,
                 spec.capacity, n);
    control_at.push_back(control_used[static_cast<size_t>(spec.to)]);
    control_used[static_cast<size_t>(spec.to)] += round_up(sizeof(LinkControl), kAlign);
    data_at.push_back(data_used[static_cast<size_t>(spec.to)]);
    data_used[static_cast<size_t>(spec.to)] += round_up(spec.capacity, kAlign);
  }
  const int64_t control_bytes =
      std::max(kAlign, *std::max_element(control_used.begin(), control_used.end()));
  const int64_t data_bytes = std::max(kAlign, *std::max_element(data_used.begin(), data_used.end()));
  control_ = make_host_shared_regions(comm, control_bytes);
  data_ = make_shared_regions(comm, data_bytes);

  ends_.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const SharedLinkSpec& spec = specs[i];
    if (spec.from != rank_ && spec.to != rank_) continue;
    auto end = std::make_unique<LinkEnd>();
    end->sends = spec.from == rank_;
    end->peer = end->sends ? spec.to : spec.from;
    end->control = reinterpret_cast<LinkControl*>(
        static_cast<uint8_t*>(control_->region(spec.to).data_ptr()) + control_at[i]);
    end->ring = static_cast<uint8_t*>(data_->region(spec.to).data_ptr()) + data_at[i];
    end->capacity = spec.capacity;
#if DTRAIN_CUDA
    if (device_.is_cuda()) {
      end->own_stream = std::make_unique<OwnStream>(device_);
      end->stream = end->own_stream->stream();
    }
#endif
    ends_[i] = std::move(end);
  }
  thread_ = std::thread([this] { run(); });
}

SharedLinkEngine::~SharedLinkEngine() {
  stopping_ = true;
  thread_.join();
  // No copy of this rank may still run into or out of a region once it goes.
  for (const auto& end : ends_) {
    if (end && end->stream) end->stream->synchronize();
  }
}

std::shared_ptr<Op> SharedLinkEngine::post(LinkEnd& end, const torch::Tensor& tensor) {
  auto op = std::make_shared<Op>();
  op->tensor = tensor;
  op->data = tensor.data_ptr();
  op->bytes = static_cast<int64_t>(tensor.nbytes());
  op->posted_at = Clock::now();
  if (device_.is_cuda()) {
    op->ready.emplace(c10::DeviceType::CUDA);
    op->ready->record(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device_));
  }
  {
    const std::lock_guard<std::mutex> lock(end.mutex);
    op->number = end.posted++;
    end.ops.push_back(op);
  }
  if (!device_.is_cuda()) ring(head(rank_));
  return op;
}

void SharedLinkEngine::copy(LinkEnd& end, Op& op, void* dst, const void* src, int64_t bytes) {
  if (!end.stream) {
    data_->copy(dst, src, bytes);
    return;
  }
  const c10::StreamGuard guard(*end.stream);
  op.ready->block(*end.stream);
  if (bytes > 0) data_->copy(dst, src, bytes);
  op.done.emplace(c10::DeviceType::CUDA);
  op.done->record(*end.stream);
}

template <typename Announce>
bool SharedLinkEngine::complete_copied(LinkEnd& end, const Announce& announce) const {
  bool moved = false;
  while (!end.ops.empty() && end.ops.front()->stage.load(std::memory_order_relaxed) == kIssued &&
         copied(*end.ops.front())) {
    Op& op = *end.ops.front();
    announce(op);
    op.tensor = torch::Tensor();
    op.stage.store(kComplete, std::memory_order_release);
    end.ops.pop_front();
    moved = true;
  }
  return moved;
}

bool SharedLinkEngine::advance_send(LinkEnd& end) {
  bool moved = false;
  for (const auto& op : end.ops) {  // issued in order: the first not issued
    if (op->stage.load(std::memory_order_relaxed) != kPosted) continue;
    const auto size = static_cast<uint64_t>(round_up(op->bytes, kAlign));
    const auto capacity = static_cast<uint64_t>(end.capacity);
    uint64_t start = end.head;
    if (start % capacity + size > capacity) start += capacity - start % capacity;  // no wrap
    if (start + size - end.control->freed.load(std::memory_order_acquire) > capacity) break;
    if (end.issued - end.control->consumed.load(std::memory_order_acquire) >= kDescriptors) break;
    op->offset = start % capacity;
    op->end = start + size;
    end.head = op->end;
    copy(end, *op, end.ring + op->offset, op->data, op->bytes);
    ++end.issued;
    op->stage.store(kIssued, std::memory_order_release);
    moved = true;
  }
  const bool completed = complete_copied(end, [&end](const Op& op) {
    end.control->descriptors[op.number % kDescriptors] = {op.offset,
                                                          static_cast<uint64_t>(op.bytes), op.end};
    end.control->published.store(op.number + 1, std::memory_order_release);
  });
  if (completed) ring_after_completing(end.peer);
  return completed || moved;
}

bool SharedLinkEngine::advance_recv(LinkEnd& end) {
  bool moved = false;
  for (const auto& op : end.ops) {
    if (op->stage.load(std::memory_order_relaxed) != kPosted) continue;
    if (end.control->published.load(std::memory_order_acquire) <= end.issued) break;
    const Descriptor message = end.control->descriptors[end.issued % kDescriptors];
    if (message.bytes != static_cast<uint64_t>(op->bytes)) {
      fail(fmt::format("a receive of {} bytes from rank {} over a shared link met message #{} "
                       "of {} bytes (the ranks disagree about what they exchange)",
                       op->bytes, end.peer, op->number, message.bytes));
    }
    copy(end, *op, op->data, end.ring + message.offset, op->bytes);
    op->end = message.end;
    ++end.issued;
    op->stage.store(kIssued, std::memory_order_release);
    moved = true;
  }
  const bool completed = complete_copied(end, [&end](const Op& op) {
    end.control->freed.store(op.end, std::memory_order_release);
    end.control->consumed.store(op.number + 1, std::memory_order_release);
  });
  if (completed) ring_after_completing(end.peer);
  return completed || moved;
}

bool SharedLinkEngine::progress() {
  bool moved = false;
  for (const auto& end : ends_) {
    if (!end) continue;
    const std::unique_lock<std::mutex> lock(end->mutex, std::try_to_lock);
    if (lock.owns_lock()) moved = (end->sends ? advance_send(*end) : advance_recv(*end)) || moved;
  }
  return moved;
}

void SharedLinkEngine::ring_after_completing(int peer) const {
  if (device_.is_cuda()) return;
  ring(head(peer));
  ring(head(rank_));  // a caller waiting for what this thread completed
}

void SharedLinkEngine::idle(std::chrono::microseconds most) {
  if (device_.is_cuda()) {
    std::this_thread::sleep_for(kGpuPoll);
    return;
  }
  RankControl& me = head(rank_);
  const uint32_t seen = me.doorbell.load();
  if (progress()) return;  // what rang before `seen` was read
  sleep_on(me, seen, most);
}

void SharedLinkEngine::run() {
  if (device_.is_cuda()) c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(device_);
  auto next_check = Clock::now();
  int idle_polls = 0;
  while (!stopping_.load()) {
    const bool moved = progress();
    if (Clock::now() > next_check) {
      report_if_alarmed();
      check_deadlines();
      next_check = Clock::now() + std::chrono::milliseconds(10);
    }
    // Spin while messages flow, then sleep so that an idle link leaves the core free. On CPU
    // ranks the callers move the links (the server thread tests its receives, waits wait
    // on the doorbell), so this thread is a backstop: woken for every message, it took a
    // core's share from the compute of 4 ranks on 2 cores.
    idle_polls = moved ? 0 : idle_polls + 1;
    if (idle_polls > 16) std::this_thread::sleep_for(device_.is_cuda() ? kGpuPoll : kCpuPoll);
  }
}

void SharedLinkEngine::check_deadlines() {
  const auto limit = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(timeout_s_));
  for (const auto& end : ends_) {
    if (!end) continue;
    const std::lock_guard<std::mutex> lock(end->mutex);
    if (end->ops.empty() || Clock::now() - end->ops.front()->posted_at < limit) continue;
    const Op& op = *end->ops.front();
    const uint64_t published = end->control->published.load();
    const uint64_t consumed = end->control->consumed.load();
    std::string state;
    if (end->sends) {
      state = op.stage.load() == kPosted
                  ? fmt::format("no room in rank {}'s ring: it has received {} of the {} "
                                "messages sent (a receiver that stopped receiving?)",
                                end->peer, consumed, published)
                  : "its copy into the peer's ring has not completed";
    } else {
      state = published > op.number
                  ? "its copy out of the ring has not completed"
                  : fmt::format("rank {} has sent {} message(s) (a sender that stopped?)",
                                end->peer, published);
    }
    fail(fmt::format("{} rank {} over a shared link, message #{} ({} bytes), did not complete "
                     "within dist.timeout_s = {} s: {}",
                     end->sends ? "send to" : "receive from", end->peer, op.number, op.bytes,
                     timeout_s_, state));
  }
}

void SharedLinkEngine::report_if_alarmed() {
  if (reported_) return;
  const int found_by = head(rank_).stuck.load(std::memory_order_acquire) - 1;
  if (found_by < 0) return;
  reported_ = true;
  log::to_file(fmt::format("rank {}: a shared link was found stuck by rank {}; where this "
                           "rank's threads sit:\n{}",
                           rank_, found_by, thread_stacks()));
}

void SharedLinkEngine::fail(const std::string& what) const {
  log::error("rank {}: {}; ending the job", rank_, what);
  for (int r = 0; r < ranks_; ++r) {
    int none = 0;
    head(r).stuck.compare_exchange_strong(none, rank_ + 1, std::memory_order_acq_rel);
  }
  log::to_file(thread_stacks());  // where this rank's threads sit
  // The other ranks' progress threads look every 10 ms and take 0.3 s to write theirs.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  abort_world(3);
}

class SharedLinkWork : public Work {
 public:
  SharedLinkWork(std::shared_ptr<SharedLinkEngine> engine, std::shared_ptr<Op> op, int source,
                 bool receives)
      : engine_(std::move(engine)), op_(std::move(op)), source_(source), receives_(receives),
        started_(host_now()) {}

  void wait() override {
    // On GPUs the copy need only be queued: the current stream then waits for it. The
    // progress thread ends the job should it never be.
    const int enough = op_->ready ? kIssued : kComplete;
    for (int polls = 0; op_->stage.load(std::memory_order_acquire) < enough; ++polls) {
      if (!engine_->progress() && polls > 100) engine_->idle(std::chrono::milliseconds(1));
    }
    if (op_->ready) {
      op_->done->block(
          c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(engine_->device()));
    }
    if (!finished_) finished_ = host_now();
  }
  // A send is complete once announced to the peer (published), not merely copied: an
  // announcement left to the progress thread needs a CUDA call, which a thread of this
  // process blocking inside the driver (a pageable read after a collective) can hold up while
  // the peer waits for it (a deadlock on 2 x H200 when a worker, done, went on to a
  // collective before its last send was published). A receive is complete once its copy
  // has landed: the data is usable, and freeing its ring space holds up no one who waits
  // for this rank (the reads of the parameter server ran 7% faster so, 2 x H200).
  bool test() override {
    if (op_->stage.load(std::memory_order_acquire) != kComplete) engine_->progress();
    const int stage = op_->stage.load(std::memory_order_acquire);
    return stage == kComplete ||
           (receives_ && stage == kIssued && op_->done && op_->done->query());
  }
  std::shared_ptr<const TimePoint> started() const override { return started_; }
  std::shared_ptr<const TimePoint> finished() const override {
    return finished_ ? finished_ : started_;
  }
  int source() const override { return source_; }

 private:
  std::shared_ptr<SharedLinkEngine> engine_;
  std::shared_ptr<Op> op_;
  int source_;
  bool receives_;
  std::shared_ptr<const TimePoint> started_, finished_;
};

class SharedLink : public Communicator {
 public:
  SharedLink(std::shared_ptr<SharedLinkEngine> engine, LinkEnd* end)
      : engine_(std::move(engine)), end_(end),
        rank_(engine_->rank() < end->peer ? 0 : 1) {}

  int rank() const override { return rank_; }
  int size() const override { return 2; }
  std::string backend() const override { return "shared"; }
  torch::Device device() const override { return engine_->device(); }
  std::shared_ptr<const TimePoint> now() override { return host_now(); }

  std::unique_ptr<Work> send(torch::Tensor tensor, int peer, int tag) override {
    check(tensor, peer, tag, /*sending=*/true);
    return std::make_unique<SharedLinkWork>(engine_, engine_->post(*end_, tensor), rank_, false);
  }
  std::unique_ptr<Work> recv(torch::Tensor tensor, int peer, int tag) override {
    check(tensor, peer, tag, /*sending=*/false);
    return std::make_unique<SharedLinkWork>(engine_, engine_->post(*end_, tensor), 1 - rank_, true);
  }

  std::unique_ptr<Work> all_reduce(torch::Tensor, ReduceOp) override { unsupported("all_reduce"); }
  std::unique_ptr<Work> reduce(torch::Tensor, int, ReduceOp) override { unsupported("reduce"); }
  std::unique_ptr<Work> broadcast(torch::Tensor, int) override { unsupported("broadcast"); }
  std::unique_ptr<Work> all_gather(torch::Tensor, torch::Tensor) override {
    unsupported("all_gather");
  }
  std::unique_ptr<Work> all_gather_v(torch::Tensor, torch::Tensor,
                                     std::vector<int64_t>) override {
    unsupported("all_gather_v");
  }
  std::unique_ptr<Work> reduce_scatter(torch::Tensor, torch::Tensor, ReduceOp) override {
    unsupported("reduce_scatter");
  }
  std::optional<Envelope> iprobe(int, int) override { unsupported("iprobe"); }
  Envelope probe(int, int) override { unsupported("probe"); }
  std::unique_ptr<Work> recv_probed(const Envelope&, torch::Tensor) override {
    unsupported("recv_probed");
  }
  void barrier() override { unsupported("barrier"); }
  std::unique_ptr<Communicator> split(int, int) override { unsupported("split"); }
  std::unique_ptr<Communicator> dup() override { unsupported("dup"); }
  std::unique_ptr<Communicator> dup_with_max_ctas(int) override { unsupported("dup"); }

 private:
  void check(const torch::Tensor& tensor, int peer, int tag, bool sending) const {
    if (sending != end_->sends) {
      throw UserError(fmt::format("a shared link {} rank {} carries {} only",
                                  end_->sends ? "to" : "from", end_->peer,
                                  end_->sends ? "send()" : "recv()"));
    }
    if (peer != 1 - rank_ || tag != 0) {
      throw UserError(fmt::format("a shared link's peer is rank {} and its tag 0, not rank {} "
                                  "tag {}",
                                  1 - rank_, peer, tag));
    }
    if (!tensor.is_contiguous() || tensor.device() != engine_->device()) {
      throw UserError(fmt::format("a shared link moves contiguous tensors on {}, not a{} "
                                  "tensor on {}",
                                  engine_->device().str(),
                                  tensor.is_contiguous() ? "" : " non-contiguous",
                                  tensor.device().str()));
    }
    if (round_up(static_cast<int64_t>(tensor.nbytes()), kAlign) > end_->capacity) {
      throw UserError(fmt::format("a message of {} bytes does not fit the shared link's ring of "
                                  "{} bytes",
                                  tensor.nbytes(), end_->capacity));
    }
  }
  [[noreturn]] static void unsupported(const char* operation) {
    throw UserError(fmt::format("a shared link carries send() and recv() only, not {}()",
                                operation));
  }

  std::shared_ptr<SharedLinkEngine> engine_;
  LinkEnd* end_;
  int rank_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_shared_links(
    Communicator& comm, const std::vector<SharedLinkSpec>& specs, double timeout_s) {
  auto engine = std::make_shared<SharedLinkEngine>(comm, specs, timeout_s);
  std::vector<std::shared_ptr<Communicator>> links(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    if (LinkEnd* end = engine->end(i)) links[i] = std::make_shared<SharedLink>(engine, end);
  }
  return links;
}

}  // namespace dtrain::dist
