#include "dist/comm/mpi_communicator.h"

#include "common/error.h"
#include "dist/comm/gather.h"
#include "dist/comm/mpi_groups.h"
#include "dist/comm/mpi_types.h"
#include "dist/comm/mpi_work.h"
#include "dist/comm/nodes.h"
#include "dist/comm/progress_channel.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

namespace dtrain::dist {

// A message matched by MPI_Improbe: MPI hands it to one MPI_Imrecv and no other receive.
class ProbedMessage {
 public:
  explicit ProbedMessage(MPI_Message message) : message(message) {}
  MPI_Message message;  // MPI_MESSAGE_NULL once received
};

namespace {

std::string tag_name(int tag) { return tag == kAnyTag ? "any tag" : fmt::format("tag {}", tag); }

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, double timeout_s)
      : comm_(comm),
        timeout_s_(timeout_s),
        threads_multiple_(mpi_threads_multiple()),
        progress_(std::make_shared<ProgressChannel>(comm)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    progress_.reset();
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  torch::Device device() const override { return torch::kCPU; }
  std::shared_ptr<const TimePoint> now() override { return host_now(); }

  std::unique_ptr<Work> all_reduce(torch::Tensor tensor, ReduceOp op) override {
    check_tensor(tensor, "all_reduce");
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), count(tensor),
                                    mpi_type(tensor), mpi_sum(tensor), comm_, &request));
    return make_work(request, "all_reduce", tensor, {averaging(tensor, op)});
  }

  std::unique_ptr<Work> reduce(torch::Tensor tensor, int root, ReduceOp op) override {
    check_tensor(tensor, "reduce");
    check_rank(root, "reduce root");
    // The root reduces into its own tensor; the others only send theirs.
    const bool at_root = rank_ == root;
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Ireduce(at_root ? MPI_IN_PLACE : tensor.data_ptr(),
                                 at_root ? tensor.data_ptr() : nullptr, count(tensor),
                                 mpi_type(tensor), mpi_sum(tensor), root, comm_, &request));
    return make_work(request, "reduce", tensor, {at_root ? averaging(tensor, op) : nullptr});
  }

  std::unique_ptr<Work> broadcast(torch::Tensor tensor, int root) override {
    check_tensor(tensor, "broadcast");
    check_rank(root, "broadcast root");
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Ibcast(tensor.data_ptr(), count(tensor), mpi_type(tensor), root, comm_,
                                &request));
    return make_work(request, "broadcast", tensor, {});
  }

  std::unique_ptr<Work> all_gather(torch::Tensor input, torch::Tensor output) override {
    check_tensor(input, "all_gather");
    check_tensor(output, "all_gather");
    DTRAIN_CHECK(output.numel() == input.numel() * size_,
                 "all_gather output holds {} elements, needs {} x {}", output.numel(), size_,
                 input.numel());
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Iallgather(input.data_ptr(), count(input), mpi_type(input),
                                    output.data_ptr(), count(input), mpi_type(output), comm_,
                                    &request));
    return make_work(request, "all_gather", input, {});
  }

  std::unique_ptr<Work> all_gather_v(torch::Tensor input, torch::Tensor output,
                                     std::vector<int64_t> counts) override {
    check_tensor(input, "all_gather_v");
    check_tensor(output, "all_gather_v");
    const std::vector<int64_t> offsets = all_gather_v_offsets(input, output, counts, rank_);
    DTRAIN_CHECK(output.numel() <= INT_MAX, "all_gather_v: {} elements exceed MPI's int "
                 "displacements", output.numel());
    // MPI reads both arrays until the operation completes: the Work holds them.
    auto arrays = std::make_shared<std::vector<int>>(offsets.begin(), offsets.end());
    arrays->insert(arrays->end(), counts.begin(), counts.end());
    const int* displacements = arrays->data();
    const int* received = arrays->data() + offsets.size();
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Iallgatherv(input.data_ptr(), count(input), mpi_type(input),
                                     output.data_ptr(), received, displacements,
                                     mpi_type(output), comm_, &request));
    return make_work(request, "all_gather_v", input, {nullptr, std::move(arrays)});
  }

  std::unique_ptr<Work> reduce_scatter(torch::Tensor input, torch::Tensor output,
                                       ReduceOp op) override {
    check_tensor(input, "reduce_scatter");
    check_tensor(output, "reduce_scatter");
    DTRAIN_CHECK(input.numel() == output.numel() * size_,
                 "reduce_scatter input holds {} elements, needs {} x {}", input.numel(), size_,
                 output.numel());
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(),
                                               count(output), mpi_type(output), mpi_sum(output),
                                               comm_, &request));
    return make_work(request, "reduce_scatter", output, {averaging(output, op)});
  }

  std::unique_ptr<Work> send(torch::Tensor tensor, int peer, int tag) override {
    check_tensor(tensor, "send");
    check_rank(peer, "send to");
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Isend(tensor.data_ptr(), count(tensor), mpi_type(tensor), peer, tag,
                               comm_, &request));
    return make_work(request, fmt::format("send to {} (tag {})", peer_name(peer), tag), tensor,
                     {});
  }

  std::unique_ptr<Work> recv(torch::Tensor tensor, int peer, int tag) override {
    check_tensor(tensor, "recv");
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Irecv(tensor.data_ptr(), count(tensor), mpi_type(tensor),
                               mpi_source(peer), tag, comm_, &request));
    return make_work(request, fmt::format("recv from {} (tag {})", peer_name(peer), tag), tensor,
                     {nullptr, nullptr, /*receive=*/true});
  }

  std::optional<Envelope> iprobe(int source, int tag) override {
    check_thread("iprobe");
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    DTRAIN_MPI_CHECK(MPI_Improbe(mpi_source(source), tag == kAnyTag ? MPI_ANY_TAG : tag, comm_,
                                 &found, &message, &status));
    if (!found) return std::nullopt;
    int bytes = 0;
    DTRAIN_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &bytes));
    return Envelope{status.MPI_SOURCE, status.MPI_TAG, bytes,
                    std::make_shared<ProbedMessage>(message)};
  }

  Envelope probe(int source, int tag) override {
    std::optional<Envelope> envelope;
    poll_until([&] { return (envelope = iprobe(source, tag)).has_value(); }, timeout_s_,
               *progress_, [&] {
                 return fmt::format("probe for a message from {} with {} found none within "
                                    "dist.timeout_s = {} s",
                                    peer_name(source), tag_name(tag), timeout_s_);
               });
    return *envelope;
  }

  std::unique_ptr<Work> recv_probed(const Envelope& envelope, torch::Tensor tensor) override {
    check_tensor(tensor, "recv_probed");
    DTRAIN_CHECK(envelope.message && envelope.message->message != MPI_MESSAGE_NULL,
                 "recv_probed: the envelope from rank {} (tag {}) was received already, or did "
                 "not come from probe() or iprobe()",
                 envelope.source, envelope.tag);
    DTRAIN_CHECK(static_cast<int64_t>(tensor.nbytes()) == envelope.bytes,
                 "recv_probed: the message from rank {} (tag {}) holds {} bytes, the tensor {}",
                 envelope.source, envelope.tag, envelope.bytes, tensor.nbytes());
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Imrecv(tensor.data_ptr(), count(tensor), mpi_type(tensor),
                                &envelope.message->message, &request));
    return make_work(request,
                     fmt::format("recv from {} (tag {})", peer_name(envelope.source),
                                 envelope.tag),
                     tensor, {nullptr, nullptr, /*receive=*/true});
  }

  void barrier() override {
    check_thread("barrier");
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Ibarrier(comm_, &request));
    make_work(request, "barrier", torch::Tensor(), {})->wait();
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    check_thread("split");
    MPI_Comm sub;
    DTRAIN_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
    return std::make_unique<MpiCommunicator>(sub, timeout_s_);
  }

  std::unique_ptr<Communicator> dup() override {
    check_thread("dup");
    MPI_Comm copy;
    DTRAIN_MPI_CHECK(MPI_Comm_dup(comm_, &copy));
    return std::make_unique<MpiCommunicator>(copy, timeout_s_);
  }

  std::unique_ptr<Communicator> dup_with_max_ctas(int /*max_ctas*/) override { return dup(); }

 private:
  // What make_work adds to an MpiOp: all but its name and number.
  struct Extras {
    std::function<void()> on_done = nullptr;
    std::shared_ptr<const void> held = nullptr;
    bool receive = false;
  };

  static int count(const torch::Tensor& tensor) {
    DTRAIN_CHECK(tensor.numel() <= INT_MAX, "{} elements exceed MPI's int count",
                 tensor.numel());
    return static_cast<int>(tensor.numel());
  }

  // MPI calls off the main thread are undefined unless MPI granted MPI_THREAD_MULTIPLE.
  void check_thread(const char* op) const {
    if (threads_multiple_) return;
    int is_main = 0;
    MPI_Is_thread_main(&is_main);
    if (is_main) return;
    throw UserError(fmt::format(
        "{} on MPI from a thread other than the main one needs MPI_THREAD_MULTIPLE, which this "
        "MPI library did not grant; use an MPI built with thread support (Open MPI: "
        "--enable-mpi-thread-multiple), or communicate from the main thread only",
        op));
  }

  void check_tensor(const torch::Tensor& tensor, const char* op) const {
    check_thread(op);
    DTRAIN_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(),
                 "{} on MPI needs a contiguous CPU tensor, got {} {}", op, tensor.device().str(),
                 tensor.is_contiguous() ? "contiguous" : "strided");
  }

  // As the job numbers it (this communicator's rank `source` may be another there).
  std::string peer_name(int source) const {
    return source == kAnySource ? "any rank"
                                : fmt::format("rank {}", progress_->world_rank(source));
  }

  void check_rank(int rank, const char* role) const {
    DTRAIN_CHECK(rank >= 0 && rank < size_, "{} {} is not a rank of this communicator (size {})",
                 role, rank, size_);
  }

  int mpi_source(int source) const {
    if (source == kAnySource) return MPI_ANY_SOURCE;
    check_rank(source, "message from");
    return source;
  }

  // MPI has no average: divide the sum once it has arrived.
  std::function<void()> averaging(torch::Tensor tensor, ReduceOp op) const {
    if (op != ReduceOp::kAverage) return nullptr;
    const double size = size_;
    return [tensor, size]() mutable { tensor.div_(size); };
  }

  std::unique_ptr<Work> make_work(MPI_Request request, const std::string& op,
                                  const torch::Tensor& tensor, Extras extras) {
    MpiOp work;
    work.sequence = progress_->next();
    work.what = tensor.defined() ? fmt::format("{} #{} ({} x {})", op, work.sequence,
                                               tensor.numel(), c10::toString(tensor.scalar_type()))
                                 : fmt::format("{} #{}", op, work.sequence);
    work.receive = extras.receive;
    work.on_done = std::move(extras.on_done);
    work.held = std::move(extras.held);
    return std::make_unique<MpiWork>(request, std::move(work), timeout_s_, progress_);
  }

  MPI_Comm comm_;
  double timeout_s_;
  bool threads_multiple_;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<ProgressChannel> progress_;
};

std::optional<WorldInfo> g_started;  // set once by init_world()
int g_exit_code = 0;                   // the process's, once noted (note_exit_code)

// With recovery on, a rank of the world may have died, and Open MPI 4.1's MPI_Finalize then
// now and then waits for it forever (in its PMIx fence: 1 run in about 10 of e2e.worker_loss
// on a loaded machine, every survivor's work done). So it gets this long, then the rank exits
// as it would have.
constexpr std::chrono::seconds kFinalizeGrace(10);

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  free_half_types();
  if (world_survives_rank_loss()) {
    std::fflush(nullptr);  // the grace's exit flushes nothing
    std::thread([] {
      std::this_thread::sleep_for(kFinalizeGrace);
      std::fprintf(stderr, "warning: rank %d: MPI_Finalize still waits after %d s (for a lost "
                   "rank); exiting without it\n", g_started ? g_started->rank : -1,
                   static_cast<int>(kFinalizeGrace.count()));
      std::_Exit(g_exit_code);
    }).detach();
  }
  MPI_Finalize();
}

// The rank has said why it ends, in one line; Open MPI 4's MPI_Abort would add its own banner
// of eight ("MPI_ABORT was invoked on rank 0 ... NOTE: invoking MPI_ABORT causes Open MPI to
// kill all MPI processes ..."), and mpirun "1 more process has sent help message". Its runtime
// (ORTE) prints no help message from a process whose orte_execute_quiet is set. `mpirun -q`
// sets that in every process, but also hides mpirun's own errors (too few slots, a missing
// program); set here, just before the abort, it hides the banner and nothing else. An MPI
// without that symbol (MPICH, Open MPI 5) is left as it is.
void silence_abort_banner() {
  if (auto* quiet = static_cast<bool*>(dlsym(RTLD_DEFAULT, "orte_execute_quiet"))) *quiet = true;
}

}  // namespace

WorldInfo init_world() {
  static const WorldInfo world = [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // Multiple: an NCCL communicator's watchdog thread answers and asks "how far are you?"
      // over MPI (progress_channel.h) while the main thread may be in MPI too, and a server
      // thread communicates on its own communicator (communicator.h). An MPI that offers less
      // still runs: its NCCL timeouts cannot name the missing ranks, and MPI operations from
      // a second thread throw.
      int provided = 0;
      DTRAIN_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
      std::atexit(finalize_at_exit);
    }
    create_half_types();
    WorldInfo info;
    MPI_Comm_rank(MPI_COMM_WORLD, &info.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &info.size);
    const NodeLayout layout = detect_nodes(info.rank, info.size);
    info.node = layout.node;
    info.num_nodes = layout.num_nodes;
    info.local_rank = layout.local_rank;
    info.local_size = layout.local_size;
    set_error_rank(info.rank);
    g_started = info;
    return info;
  }();
  return world;
}

namespace {

// This process's rank as the launcher set it, before MPI can say: "?" where none did.
std::string launched_rank_text() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) return value;
  }
  return "?";
}

}  // namespace

WorldInfo init_world_within(double timeout_s) {
  std::mutex mutex;
  std::condition_variable started;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mutex);
    if (started.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done; })) {
      return;
    }
    std::fprintf(stderr,
                 "error: rank %s: MPI's start-up did not complete within %g s (dist.timeout_s): "
                 "a rank did not start, or stopped while starting\n",
                 launched_rank_text().c_str(), timeout_s);
    std::fflush(stderr);
    std::_Exit(3);
  });
  const auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
    }
    started.notify_one();
    watchdog.join();
  };
  try {
    const WorldInfo world = init_world();
    finish();
    return world;
  } catch (...) {
    finish();
    throw;
  }
}

std::optional<WorldInfo> started_world() {
  if (world_finalized()) return std::nullopt;
  return g_started;
}

bool world_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

bool world_survives_rank_loss() {
  const char* value = std::getenv("OMPI_MCA_orte_enable_recovery");
  if (value == nullptr) return false;
  const std::string on(value);
  return on == "1" || on == "true" || on == "yes" || on == "on";
}

void note_exit_code(int exit_code) {
  g_exit_code = exit_code;
  const char* dir = std::getenv("DTRAIN_EXIT_CODES");
  if (exit_code == 0 || dir == nullptr || !world_survives_rank_loss()) return;
  // MPI may not have started (a bad config): the launcher's rank names the file.
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  std::ofstream(fmt::format("{}/rank{}", dir, rank ? rank : "0")) << exit_code << "\n";
}

void abort_world(int exit_code) {
  // With recovery on, MPI_Abort ends this rank only (the others end at their timeouts).
  note_exit_code(exit_code);
  silence_abort_banner();
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; should it, this rank still ends
}

int end_world(int exit_code) {
  const std::optional<WorldInfo> world = started_world();
  if (!world || world->size == 1 || world_survives_rank_loss()) return exit_code;
  const int agreed = max_over_world(exit_code);
  if (agreed == 0) return 0;
  std::fflush(nullptr);
  abort_world(agreed);
}

int max_over_world(int value) {
  init_world();
  int result = value;
  DTRAIN_MPI_CHECK(MPI_Allreduce(&value, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return result;
}

std::string mpi_library_version() {
  // One of the few MPI calls allowed before MPI_Init.
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  DTRAIN_MPI_CHECK(MPI_Get_library_version(text, &length));
  const std::string version(text);  // NUL-terminated; `length` may count trailing NULs
  return version.substr(0, version.find_first_of("\r\n"));
}

std::unique_ptr<Communicator> make_mpi_world(double timeout_s) {
  init_world();
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, timeout_s);
}

std::unique_ptr<Communicator> make_mpi_first_ranks(int num_ranks, double timeout_s) {
  init_world();
  return std::make_unique<MpiCommunicator>(first_world_ranks(num_ranks), timeout_s);
}

std::unique_ptr<Communicator> make_mpi_node(double timeout_s) {
  const WorldInfo world = init_world();
  return make_mpi_world(timeout_s)->split(world.node, world.rank);
}

}  // namespace dtrain::dist
