#include "dist/comm/nccl_communicator.h"

#include "common/error.h"
#include "common/log.h"
#include "dist/comm/gather.h"
#include "dist/comm/mpi_communicator.h"
#include "dist/comm/mpi_groups.h"
#include "dist/comm/nccl_types.h"
#include "dist/comm/nccl_work.h"
#include "dist/comm/progress_channel.h"
#include "dist/comm/watchdog.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace dtrain::dist {

namespace {

size_t count(const torch::Tensor& tensor) { return static_cast<size_t>(tensor.numel()); }

// How long ncclCommAbort may take, after a timeout, before MPI_Abort ends the job regardless.
constexpr std::chrono::seconds kAbortGrace(5);

class NcclCommunicator : public Communicator {
 public:
  // Creates the NCCL communicator with `create`, collective over its future members, bounded
  // by the watchdog under the name `what`.
  // `progress`: the side channel over an MPI communicator with the same members and ranks.
  NcclCommunicator(c10::DeviceIndex device, double timeout_s, const std::string& what,
                   std::unique_ptr<ProgressChannel> progress,
                   const std::function<ncclComm_t()>& create)
      : device_(device),
        timeout_s_(timeout_s),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device)),
        ready_(device, cudaEventDisableTiming),
        timing_events_(CudaEventPool::create(device, cudaEventDefault)),
        untimed_events_(CudaEventPool::create(device, cudaEventDisableTiming)),
        progress_(std::move(progress)),
        watchdog_(timeout_s, watchdog_hooks()) {
    c10::cuda::CUDAGuard guard(device_);  // NCCL binds a communicator to the current device
    auto created = std::make_shared<std::atomic<bool>>(false);
    watchdog_.watch(what, 0, [created] { return created->load(); });
    comm_.store(create());
    created->store(true);
    DTRAIN_NCCL_CHECK(ncclCommUserRank(comm(), &rank_));
    DTRAIN_NCCL_CHECK(ncclCommCount(comm(), &size_));
  }

  ~NcclCommunicator() override {
    // Kernels in flight use the communicator: launch what was posted, let the stream drain
    // (the watchdog bounds both), then destroy it. Errors are logged, not thrown.
    try {
      launch_posted();
    } catch (const std::exception& e) {
      log::warn("rank {}: sends/receives posted but never waited for: {}", error_rank(),
                e.what());
    }
    const cudaError_t drained = cudaStreamSynchronize(stream_.stream());
    if (drained != cudaSuccess && drained != cudaErrorCudartUnloading) {
      log::warn("rank {}: NCCL stream: {}", error_rank(), cudaGetErrorString(drained));
    }
    ncclComm_t comm = comm_.exchange(nullptr);  // a timeout from here on only ends the job
    auto destroyed = std::make_shared<std::atomic<bool>>(false);
    watchdog_.watch("destroying the NCCL communicator", 0,
                    [destroyed] { return destroyed->load(); });
    const ncclResult_t status = ncclCommDestroy(comm);
    destroyed->store(true);
    if (status != ncclSuccess) {
      log::warn("rank {}: ncclCommDestroy: {}", error_rank(), ncclGetErrorString(status));
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  torch::Device device() const override { return torch::Device(torch::kCUDA, device_); }

  std::shared_ptr<const TimePoint> now() override {
    c10::cuda::CUDAGuard guard(device_);  // the null (default) stream is the current device's
    auto event = event_pool(capturing()).acquire();
    event->record(c10::cuda::getCurrentCUDAStream(device_).stream());
    return std::make_shared<CudaTimePoint>(std::move(event));
  }

  std::unique_ptr<Work> all_reduce(torch::Tensor tensor, ReduceOp op) override {
    check_tensor(tensor, "all_reduce");
    return collective("all_reduce", tensor, {tensor}, [&](cudaStream_t stream) {
      DTRAIN_NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), count(tensor),
                                      nccl_type(tensor), nccl_op(op), comm(), stream));
    });
  }

  std::unique_ptr<Work> reduce(torch::Tensor tensor, int root, ReduceOp op) override {
    check_tensor(tensor, "reduce");
    check_rank(root, "reduce root");
    // In place at the root; the other ranks' tensors are only read.
    return collective("reduce", tensor, {tensor}, [&](cudaStream_t stream) {
      DTRAIN_NCCL_CHECK(ncclReduce(tensor.data_ptr(), tensor.data_ptr(), count(tensor),
                                   nccl_type(tensor), nccl_op(op), root, comm(), stream));
    });
  }

  std::unique_ptr<Work> broadcast(torch::Tensor tensor, int root) override {
    check_tensor(tensor, "broadcast");
    check_rank(root, "broadcast root");
    return collective("broadcast", tensor, {tensor}, [&](cudaStream_t stream) {
      DTRAIN_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), count(tensor),
                                      nccl_type(tensor), root, comm(), stream));
    });
  }

  std::unique_ptr<Work> all_gather(torch::Tensor input, torch::Tensor output) override {
    check_tensor(input, "all_gather");
    check_tensor(output, "all_gather");
    DTRAIN_CHECK(output.numel() == input.numel() * size_ &&
                     output.scalar_type() == input.scalar_type(),
                 "all_gather output holds {} x {}, needs {} x {} x {}", output.numel(),
                 c10::toString(output.scalar_type()), size_, input.numel(),
                 c10::toString(input.scalar_type()));
    return collective("all_gather", input, {input, output}, [&](cudaStream_t stream) {
      DTRAIN_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), count(input),
                                      nccl_type(input), comm(), stream));
    });
  }

  // NCCL has no all-gather of variable sizes: one broadcast per rank into its slice, as one
  // group. Ranks that give nothing are skipped, alike on every rank (the counts agree).
  std::unique_ptr<Work> all_gather_v(torch::Tensor input, torch::Tensor output,
                                     std::vector<int64_t> counts) override {
    check_tensor(input, "all_gather_v");
    check_tensor(output, "all_gather_v");
    const std::vector<int64_t> offsets = all_gather_v_offsets(input, output, counts, rank_);
    return collective("all_gather_v", input, {input, output}, [&](cudaStream_t stream) {
      auto* slices = static_cast<char*>(output.data_ptr());
      DTRAIN_NCCL_CHECK(ncclGroupStart());
      for (size_t r = 0; r < counts.size(); ++r) {
        if (counts[r] == 0) continue;
        void* slice = slices + offsets[r] * output.element_size();
        DTRAIN_NCCL_CHECK(ncclBroadcast(input.data_ptr(), slice, static_cast<size_t>(counts[r]),
                                        nccl_type(input), static_cast<int>(r), comm(), stream));
      }
      DTRAIN_NCCL_CHECK(ncclGroupEnd());
    });
  }

  std::unique_ptr<Work> reduce_scatter(torch::Tensor input, torch::Tensor output,
                                       ReduceOp op) override {
    check_tensor(input, "reduce_scatter");
    check_tensor(output, "reduce_scatter");
    DTRAIN_CHECK(input.numel() == output.numel() * size_ &&
                     output.scalar_type() == input.scalar_type(),
                 "reduce_scatter input holds {} x {}, needs {} x {} x {}", input.numel(),
                 c10::toString(input.scalar_type()), size_, output.numel(),
                 c10::toString(output.scalar_type()));
    return collective("reduce_scatter", output, {input, output}, [&](cudaStream_t stream) {
      DTRAIN_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), count(output),
                                          nccl_type(output), nccl_op(op), comm(), stream));
    });
  }

  std::unique_ptr<Work> send(torch::Tensor tensor, int peer, int tag) override {
    return post(std::move(tensor), peer, /*is_send=*/true,
                fmt::format("send to rank {} (tag {})", progress_->world_rank(peer), tag));
  }

  std::unique_ptr<Work> recv(torch::Tensor tensor, int peer, int tag) override {
    if (peer == kAnySource) mpi_only("recv from any rank");
    return post(std::move(tensor), peer, /*is_send=*/false,
                fmt::format("recv from rank {} (tag {})", progress_->world_rank(peer), tag));
  }

  std::optional<Envelope> iprobe(int /*source*/, int /*tag*/) override { mpi_only("iprobe"); }
  Envelope probe(int /*source*/, int /*tag*/) override { mpi_only("probe"); }
  std::unique_ptr<Work> recv_probed(const Envelope& /*envelope*/,
                                    torch::Tensor /*tensor*/) override {
    mpi_only("recv_probed");
  }

  void barrier() override {
    torch::Tensor token = torch::zeros({1}, torch::dtype(torch::kInt32).device(device()));
    const auto work = collective("barrier", torch::Tensor(), {token}, [&](cudaStream_t stream) {
      DTRAIN_NCCL_CHECK(ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclInt32, ncclSum,
                                      comm(), stream));
    });
    // Blocking on the host, as on MPI; the watchdog bounds the wait.
    while (!work->test()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    DTRAIN_CHECK(color >= 0, "split: color must be non-negative, got {}", color);
    return split_as("split", color, key);
  }

  // One color, ranks kept: the same members on a new NCCL communicator.
  std::unique_ptr<Communicator> dup() override { return split_as("dup", 0, rank_); }

  std::unique_ptr<Communicator> dup_with_max_ctas(int max_ctas) override {
    DTRAIN_CHECK(max_ctas >= 0, "dup_with_max_ctas: max_ctas must be non-negative, got {}",
                 max_ctas);
    return split_as("dup", 0, rank_, max_ctas);
  }

 private:
  // A send or receive posted and not yet launched.
  struct Posted {
    torch::Tensor tensor;
    int peer;
    bool is_send;
    std::string what;
    int64_t sequence;
    std::shared_ptr<LaunchEvents> events;
  };

  [[noreturn]] static void mpi_only(const std::string& op) {
    throw UserError(op + " is not available on NCCL: use an MPI communicator for the parameter "
                         "server's control traffic");
  }

  // `max_ctas` > 0: the child's kernels take at most that many thread blocks.
  std::unique_ptr<Communicator> split_as(const std::string& op, int color, int key,
                                         int max_ctas = 0) {
    ncclComm_t parent = comm();
    const int64_t sequence = progress_->next();
    return std::make_unique<NcclCommunicator>(
        device_, timeout_s_, describe(op, sequence, torch::Tensor()),
        progress_->split(color, key), [parent, color, key, max_ctas] {
          ncclConfig_t config = NCCL_CONFIG_INITIALIZER;  // unset fields: the parent's
          if (max_ctas > 0) {
            config.minCTAs = 1;
            config.maxCTAs = max_ctas;
          }
          ncclComm_t child = nullptr;
          DTRAIN_NCCL_CHECK(ncclCommSplit(parent, color, key, &child, &config));
          return child;
        });
  }

  ncclComm_t comm() const { return comm_.load(); }

  void check_tensor(const torch::Tensor& tensor, const char* op) const {
    DTRAIN_CHECK(tensor.device() == device() && tensor.is_contiguous(),
                 "{} on NCCL needs a contiguous tensor on {}, got {} {}", op, device().str(),
                 tensor.device().str(), tensor.is_contiguous() ? "contiguous" : "strided");
  }

  void check_rank(int rank, const char* role) const {
    DTRAIN_CHECK(rank >= 0 && rank < size_, "{} {} is not a rank of this communicator (size {})",
                 role, rank, size_);
  }

  // "all_reduce #7 (1024 x Float)": the name in timeouts, numbered in issue order.
  static std::string describe(const std::string& op, int64_t sequence,
                              const torch::Tensor& tensor) {
    return tensor.defined() ? describe(op.c_str(), sequence, tensor.numel(), tensor.scalar_type())
                            : fmt::format("{} #{}", op, sequence);
  }
  static std::string describe(const char* op, int64_t sequence, int64_t numel,
                              c10::ScalarType dtype) {
    return fmt::format("{} #{} ({} x {})", op, sequence, numel, c10::toString(dtype));
  }

  // The watchdog answers the peers' progress queries and, at a timeout, asks them, where MPI
  // lets its thread do so.
  WatchdogHooks watchdog_hooks() {
    WatchdogHooks hooks;
    const c10::DeviceIndex device = device_;
    hooks.on_thread_start = [device] { DTRAIN_CUDA_CHECK(cudaSetDevice(device)); };
    hooks.end_job = [this] { abort_job(); };
    if (mpi_threads_multiple()) {
      hooks.on_poll = [this] { progress_->answer_queries(); };
      hooks.missing_ranks = [this](int64_t sequence) {
        return progress_->missing_ranks(sequence, std::min(2.0, timeout_s_));
      };
    }
    return hooks;
  }

  // `op`: a literal (the name is formatted only at a timeout).
  std::unique_ptr<Work> collective(const char* op, const torch::Tensor& described,
                                   const std::vector<torch::Tensor>& used,
                                   const std::function<void(cudaStream_t)>& call) {
    auto events = std::make_shared<LaunchEvents>();
    const int64_t sequence = progress_->next();
    const bool captured = capturing();
    if (captured) {
      launch(used, call, {events}, /*captured=*/true);
      return std::make_unique<NcclWork>(events, device_, nullptr, std::nullopt);
    }
    // Watched before the launch: a blocking NCCL call that never returns is bounded too.
    std::function<std::string()> name;
    if (described.defined()) {
      name = [op, sequence, numel = described.numel(), dtype = described.scalar_type()] {
        return describe(op, sequence, numel, dtype);
      };
    } else {
      name = [op, sequence] { return fmt::format("{} #{}", op, sequence); };
    }
    watchdog_.watch(std::move(name), sequence, [events] { return events->done(); },
                    [events] { return events->has_started(); });
    launch(used, call, {events}, /*captured=*/false);
    return std::make_unique<NcclWork>(events, device_, nullptr, std::nullopt);
  }

  std::unique_ptr<Work> post(torch::Tensor tensor, int peer, bool is_send, const std::string& op) {
    check_tensor(tensor, is_send ? "send" : "recv");
    check_rank(peer, is_send ? "send to" : "recv from");
    auto events = std::make_shared<LaunchEvents>();
    const int64_t sequence = progress_->next();
    const std::string what = describe(op, sequence, tensor);
    posted_.push_back({std::move(tensor), peer, is_send, what, sequence, events});
    return std::make_unique<NcclWork>(events, device_, [this] { launch_posted(); },
                                      is_send ? std::nullopt : std::optional<int>(peer));
  }

  // Every posted send and receive, as one group: NCCL progresses a group's operations
  // together, so a receive posted before its rank's send does not block that send.
  void launch_posted() {
    if (posted_.empty()) return;
    std::vector<Posted> group;
    group.swap(posted_);
    std::vector<torch::Tensor> used;
    std::vector<std::shared_ptr<LaunchEvents>> group_events;
    for (const Posted& op : group) {
      watchdog_.watch(op.what, op.sequence, [events = op.events] { return events->done(); },
                      [events = op.events] { return events->has_started(); });
      used.push_back(op.tensor);
      group_events.push_back(op.events);
    }
    launch(used, [&](cudaStream_t stream) {
      DTRAIN_NCCL_CHECK(ncclGroupStart());
      for (const Posted& op : group) {
        if (op.is_send) {
          DTRAIN_NCCL_CHECK(ncclSend(op.tensor.data_ptr(), count(op.tensor),
                                     nccl_type(op.tensor), op.peer, comm(), stream));
        } else {
          DTRAIN_NCCL_CHECK(ncclRecv(op.tensor.data_ptr(), count(op.tensor),
                                     nccl_type(op.tensor), op.peer, comm(), stream));
        }
      }
      DTRAIN_NCCL_CHECK(ncclGroupEnd());
    }, group_events, /*captured=*/false);
  }

  // Steps 1-3 of the header's protocol around `call`, which issues NCCL work on `stream`.
  void launch(const std::vector<torch::Tensor>& used, const std::function<void(cudaStream_t)>& call,
              const std::vector<std::shared_ptr<LaunchEvents>>& events, bool captured) {
    c10::cuda::CUDAGuard guard(device_);
    const std::lock_guard<std::timed_mutex> calls(nccl_calls_);
    const cudaStream_t stream = stream_.stream();
    ready_.record(c10::cuda::getCurrentCUDAStream(device_).stream());
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream, ready_.get(), 0));
    auto started = event_pool(captured).acquire();
    auto finished = event_pool(captured).acquire();
    started->record(stream);
    call(stream);
    finished->record(stream);
    for (const torch::Tensor& tensor : used) {
      c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), stream_);
    }
    for (const auto& launched : events) launched->set(started, finished);
  }

  CudaEventPool& event_pool(bool captured) const {
    return timing() && !captured ? *timing_events_ : *untimed_events_;
  }

  // Whether work issued now on the current stream is captured into a CUDA graph (DDP's
  // hooks inside train.cuda_graph's capture) rather than run. A captured operation's events
  // are only the graph's dependencies: never recorded on their own, they would read as
  // complete to the watchdog and time nothing, so it is neither watched nor timed. Each
  // replay is bounded instead by the next watched operation, which waits for it on the
  // compute stream (the buffers' broadcast before the next forward, the metrics' reduction).
  bool capturing() const {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    DTRAIN_CUDA_CHECK(
        cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(device_).stream(), &status));
    return status != cudaStreamCaptureStatusNone;
  }

  // On the watchdog's thread, after it logged the timeout.
  void abort_job() {
    // Held from here to the end: a thread that launches on this communicator after its abort
    // would use what the abort freed. One stuck in a launch keeps it, and NCCL's abort with it.
    const bool calls_stopped = nccl_calls_.try_lock_for(kAbortGrace);  // never unlocked
    if (ncclComm_t comm = calls_stopped ? comm_.load() : nullptr) {
      ncclResult_t async_error = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &async_error) == ncclSuccess && async_error != ncclSuccess) {
        log::error("rank {}: NCCL reports: {} ({})", error_rank(), ncclGetErrorString(async_error),
                   ncclGetLastError(comm));
      }
      // Stops this rank's kernels that wait for peers that never come. NCCL's abort can hang
      // itself (NVIDIA/nccl#1777): it gets a few seconds, then the job ends regardless.
      auto aborted = std::make_shared<std::atomic<bool>>(false);
      std::thread([comm, aborted] {
        ncclCommAbort(comm);
        aborted->store(true);
      }).detach();
      const auto deadline = std::chrono::steady_clock::now() + kAbortGrace;
      while (!aborted->load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    abort_world(3);
  }

  c10::DeviceIndex device_;
  double timeout_s_;
  c10::cuda::CUDAStream stream_;
  CudaEvent ready_;  // re-recorded for each operation: a stream wait uses the latest record
  std::timed_mutex nccl_calls_;  // launches, against the watchdog's abort
  // Each operation's started and finished, and now()'s: timed while timing() is on.
  std::shared_ptr<CudaEventPool> timing_events_;
  std::shared_ptr<CudaEventPool> untimed_events_;
  std::atomic<ncclComm_t> comm_{nullptr};  // read by the watchdog's thread to abort it
  int rank_ = 0;
  int size_ = 1;
  std::vector<Posted> posted_;
  std::unique_ptr<ProgressChannel> progress_;  // numbers the operations; used by the watchdog
  Watchdog watchdog_;  // last: destroyed first, its thread stopped before the rest goes
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_world(int device_index, double timeout_s) {
  return make_nccl_first_ranks(device_index, timeout_s, init_world().size);
}

std::unique_ptr<Communicator> make_nccl_first_ranks(int device_index, double timeout_s,
                                                    int num_ranks) {
  const WorldInfo world = init_world();
  int devices = 0;
  DTRAIN_CUDA_CHECK(cudaGetDeviceCount(&devices));
  DTRAIN_CHECK(device_index >= 0 && device_index < devices,
               "NCCL communicator on cuda:{}, but this machine shows {} CUDA device(s)",
               device_index, devices);
  // The members' MPI communicator carries the unique id and, duplicated, the side channel.
  MPI_Comm members = first_world_ranks(num_ranks);
  auto communicator = std::make_unique<NcclCommunicator>(
      static_cast<c10::DeviceIndex>(device_index), timeout_s,
      "NCCL start-up (unique id broadcast, ncclCommInitRank)",
      std::make_unique<ProgressChannel>(members), [members, num_ranks, rank = world.rank] {
        ncclUniqueId id{};
        if (rank == 0) DTRAIN_NCCL_CHECK(ncclGetUniqueId(&id));
        const int status = MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, members);
        DTRAIN_CHECK(status == MPI_SUCCESS, "MPI_Bcast of NCCL's unique id returned {}", status);
        ncclComm_t comm = nullptr;
        DTRAIN_NCCL_CHECK(ncclCommInitRank(&comm, num_ranks, id, rank));
        return comm;
      });
  if (members != MPI_COMM_WORLD) {
    DTRAIN_CHECK(MPI_Comm_free(&members) == MPI_SUCCESS, "MPI_Comm_free of NCCL's members failed");
  }
  return communicator;
}

}  // namespace dtrain::dist
