#include "dist/comm/mpi_communicator.h"

#include "common/error.h"
#include "common/log.h"
#include "dist/comm/progress_channel.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

namespace dtrain::dist {

namespace {

using Clock = std::chrono::steady_clock;

#define DTRAIN_MPI_CHECK(call)                                                       \
  do {                                                                               \
    const int mpi_status = (call);                                                   \
    DTRAIN_CHECK(mpi_status == MPI_SUCCESS, "{} returned {}", #call, mpi_status);   \
  } while (0)

MPI_Datatype mpi_type(const torch::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case torch::kFloat32: return MPI_FLOAT;
    case torch::kFloat64: return MPI_DOUBLE;
    case torch::kInt64: return MPI_INT64_T;
    case torch::kInt32: return MPI_INT32_T;
    case torch::kUInt8: return MPI_UINT8_T;
    default:
      DTRAIN_CHECK(false, "the MPI backend has no type for {}",
                   c10::toString(tensor.scalar_type()));
  }
  return MPI_DATATYPE_NULL;
}

void check_tensor(const torch::Tensor& tensor, const char* op) {
  DTRAIN_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(),
               "{} on MPI needs a contiguous CPU tensor, got {} {}", op, tensor.device().str(),
               tensor.is_contiguous() ? "contiguous" : "strided");
}

class HostTimePoint : public TimePoint {
 public:
  explicit HostTimePoint(Clock::time_point when) : when_(when) {}
  double ms_until(const TimePoint& later) const override {
    const auto& other = dynamic_cast<const HostTimePoint&>(later);
    return std::chrono::duration<double, std::milli>(other.when_ - when_).count();
  }

 private:
  Clock::time_point when_;
};

std::shared_ptr<const TimePoint> host_now() { return std::make_shared<HostTimePoint>(Clock::now()); }

// One request in flight. wait() polls it until done or the deadline, then ends the job:
// a rank that died or never joined must not leave the others waiting forever.
class MpiWork : public Work {
 public:
  MpiWork(MPI_Request request, std::string what, int64_t sequence, double timeout_s,
          std::shared_ptr<ProgressChannel> progress, std::function<void()> on_done)
      : request_(request),
        what_(std::move(what)),
        sequence_(sequence),
        timeout_s_(timeout_s),
        progress_(std::move(progress)),
        on_done_(std::move(on_done)),
        started_(host_now()) {}

  ~MpiWork() override {
    if (request_ != MPI_REQUEST_NULL) wait();
  }

  bool test() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    DTRAIN_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    if (!done) return false;
    finished_ = host_now();
    if (on_done_) on_done_();
    return true;
  }

  void wait() override {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
    for (int polls = 0; !test(); ++polls) {
      if (Clock::now() > deadline) abort_job();
      // Spin briefly for short collectives, then sleep so a stuck wait leaves the core free.
      if (polls > 1000) {
        progress_->answer_queries();
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

  std::shared_ptr<const TimePoint> started() const override { return started_; }
  std::shared_ptr<const TimePoint> finished() const override { return finished_; }

 private:
  [[noreturn]] void abort_job() {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const std::string missing =
        progress_->missing_ranks(sequence_, std::min(2.0, timeout_s_));
    log::error("rank {}: {} did not complete within dist.timeout_s = {} s: missing rank(s) {}; "
               "ending the job",
               rank, what_, timeout_s_, missing);
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::abort();
  }

  MPI_Request request_;
  std::string what_;
  int64_t sequence_;
  double timeout_s_;
  std::shared_ptr<ProgressChannel> progress_;
  std::function<void()> on_done_;
  std::shared_ptr<const TimePoint> started_;
  std::shared_ptr<const TimePoint> finished_;
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, double timeout_s)
      : comm_(comm), timeout_s_(timeout_s), progress_(std::make_shared<ProgressChannel>(comm)) {
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
                                    mpi_type(tensor), MPI_SUM, comm_, &request));
    return make_work(request, "all_reduce", tensor, averaging(tensor, op));
  }

  std::unique_ptr<Work> broadcast(torch::Tensor tensor, int root) override {
    check_tensor(tensor, "broadcast");
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Ibcast(tensor.data_ptr(), count(tensor), mpi_type(tensor), root, comm_,
                                &request));
    return make_work(request, "broadcast", tensor, nullptr);
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
    return make_work(request, "all_gather", input, nullptr);
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
                                               count(output), mpi_type(output), MPI_SUM, comm_,
                                               &request));
    return make_work(request, "reduce_scatter", output, averaging(output, op));
  }

  std::unique_ptr<Work> send(torch::Tensor tensor, int peer, int tag) override {
    check_tensor(tensor, "send");
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Isend(tensor.data_ptr(), count(tensor), mpi_type(tensor), peer, tag,
                               comm_, &request));
    return make_work(request, fmt::format("send to rank {} (tag {})", peer, tag), tensor,
                     nullptr);
  }

  std::unique_ptr<Work> recv(torch::Tensor tensor, int peer, int tag) override {
    check_tensor(tensor, "recv");
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Irecv(tensor.data_ptr(), count(tensor), mpi_type(tensor), peer, tag,
                               comm_, &request));
    return make_work(request, fmt::format("recv from rank {} (tag {})", peer, tag), tensor,
                     nullptr);
  }

  void barrier() override {
    MPI_Request request;
    DTRAIN_MPI_CHECK(MPI_Ibarrier(comm_, &request));
    make_work(request, "barrier", torch::Tensor(), nullptr)->wait();
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub;
    DTRAIN_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
    return std::make_unique<MpiCommunicator>(sub, timeout_s_);
  }

 private:
  static int count(const torch::Tensor& tensor) {
    DTRAIN_CHECK(tensor.numel() <= INT32_MAX, "{} elements exceed MPI's int count",
                 tensor.numel());
    return static_cast<int>(tensor.numel());
  }

  // MPI has no average: divide the sum once it has arrived.
  std::function<void()> averaging(torch::Tensor tensor, ReduceOp op) const {
    if (op != ReduceOp::kAverage) return nullptr;
    const double size = size_;
    return [tensor, size]() mutable { tensor.div_(size); };
  }

  std::unique_ptr<Work> make_work(MPI_Request request, const std::string& op,
                                  const torch::Tensor& tensor, std::function<void()> on_done) {
    const int64_t sequence = progress_->next();
    const std::string what =
        tensor.defined() ? fmt::format("{} #{} ({} x {})", op, sequence, tensor.numel(),
                                       c10::toString(tensor.scalar_type()))
                         : fmt::format("{} #{}", op, sequence);
    return std::make_unique<MpiWork>(request, what, sequence, timeout_s_, progress_,
                                     std::move(on_done));
  }

  MPI_Comm comm_;
  double timeout_s_;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<ProgressChannel> progress_;
};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

WorldInfo init_world() {
  static const WorldInfo world = [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // Multiple: an NCCL communicator's watchdog thread answers and asks "how far are you?"
      // over MPI (progress_channel.h) while the main thread may be in MPI too. An MPI that
      // offers less still runs; its NCCL timeouts then cannot name the missing ranks.
      int provided = 0;
      DTRAIN_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
      std::atexit(finalize_at_exit);
    }
    WorldInfo info;
    MPI_Comm_rank(MPI_COMM_WORLD, &info.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &info.size);
    MPI_Comm local;
    DTRAIN_MPI_CHECK(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &local));
    MPI_Comm_rank(local, &info.local_rank);
    MPI_Comm_size(local, &info.local_size);
    MPI_Comm_free(&local);
    set_error_rank(info.rank);
    return info;
  }();
  return world;
}

int max_over_world(int value) {
  init_world();
  int result = value;
  DTRAIN_MPI_CHECK(MPI_Allreduce(&value, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return result;
}

std::unique_ptr<Communicator> make_mpi_world(double timeout_s) {
  init_world();
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, timeout_s);
}

}  // namespace dtrain::dist
