// All-reduce bandwidth of dtrain's NCCL communicator against raw NCCL, measured in the same
// run: float32 sums in place, one GPU per rank, sizes 1, 25 and 256 MiB (and 1024 MiB with
// --large). Ours is issued as the DDP strategy issues it (all_reduce, then wait, so each call
// also pays the stream/event handshake); raw NCCL calls ncclAllReduce back to back on one
// stream of its own communicator.
//   usage: mpirun -np N build/bench_allreduce [--large]
// Prints on rank 0 one line per size: time per call and bus bandwidth of both (and the host's
// time to issue ours), the ratio raw/ours, the time of raw NCCL with our streams' handshake
// and its two variants (Handshake below), and ours with timing events (dist::set_timing: the
// trainer's reported steps; "dtrain" is the others). Bus bandwidth as nccl-tests reports it:
// algbw = bytes / time, busbw = algbw x 2(n-1)/n. Each figure is the best of three rounds,
// the sides alternated.
#include "common/error.h"
#include "dist/comm/mpi_communicator.h"
#include "dist/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <mpi.h>
#include <nccl.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

namespace {

using dtrain::dist::Communicator;
using dtrain::dist::ReduceOp;

constexpr int64_t kMiB = 1024 * 1024;
constexpr int kRounds = 3;
constexpr int kWarmup = 5;

void check_cuda(cudaError_t status, const char* what) {
  DTRAIN_CHECK(status == cudaSuccess, "{} failed: {}", what, cudaGetErrorString(status));
}

void check_nccl(ncclResult_t status, const char* what) {
  DTRAIN_CHECK(status == ncclSuccess, "{} failed: {}", what, ncclGetErrorString(status));
}

// A plain NCCL communicator over the world, with its own stream and buffer.
struct RawNccl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* buffer = nullptr;

  RawNccl(const dtrain::dist::WorldInfo& world, int64_t max_bytes) {
    ncclUniqueId id{};
    if (world.rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, MPI_COMM_WORLD);
    check_nccl(ncclCommInitRank(&comm, world.size, id, world.rank), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaMalloc(&buffer, static_cast<size_t>(max_bytes)), "cudaMalloc");
    check_cuda(cudaMemset(buffer, 0, static_cast<size_t>(max_bytes)), "cudaMemset");
  }
  ~RawNccl() {
    cudaFree(buffer);
    cudaStreamDestroy(stream);
    ncclCommDestroy(comm);
  }
  RawNccl(const RawNccl&) = delete;
  RawNccl& operator=(const RawNccl&) = delete;

  void all_reduce(int64_t count) {
    check_nccl(ncclAllReduce(buffer, buffer, static_cast<size_t>(count), ncclFloat32, ncclSum,
                             comm, stream),
               "ncclAllReduce");
  }
};

// Raw NCCL with only the streams' handshake that ours does around each operation: the NCCL
// stream waits for the caller's stream, and the caller's stream for the result. What this
// costs beyond raw NCCL is the price of the two hops between streams; what ours costs beyond
// this is its host-side bookkeeping (the watchdog's entry, the events of the stats). Two
// variants take one step each towards ours: the caller is the legacy default stream (the
// trainer's compute stream), or the operation is bracketed by timing events (ours records a
// start and an end for the step's statistics).
struct Handshake {
  RawNccl& raw;
  cudaStream_t caller = nullptr;
  cudaEvent_t ready = nullptr;
  cudaEvent_t done = nullptr;
  cudaEvent_t started = nullptr;  // timing variant only

  enum class Variant { kPlain, kLegacyCaller, kTimingEvents };
  Variant variant;

  Handshake(RawNccl& nccl, Variant kind) : raw(nccl), variant(kind) {
    if (variant == Variant::kLegacyCaller) {
      caller = cudaStreamLegacy;
    } else {
      check_cuda(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    const unsigned done_flags =
        variant == Variant::kTimingEvents ? cudaEventDefault : cudaEventDisableTiming;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&done, done_flags), "cudaEventCreate");
    if (variant == Variant::kTimingEvents) {
      check_cuda(cudaEventCreateWithFlags(&started, cudaEventDefault), "cudaEventCreate");
    }
  }
  ~Handshake() {
    if (started) cudaEventDestroy(started);
    cudaEventDestroy(done);
    cudaEventDestroy(ready);
    if (variant != Variant::kLegacyCaller) cudaStreamDestroy(caller);
  }
  Handshake(const Handshake&) = delete;
  Handshake& operator=(const Handshake&) = delete;

  void all_reduce(int64_t count) {
    check_cuda(cudaEventRecord(ready, caller), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(raw.stream, ready, 0), "cudaStreamWaitEvent");
    if (started) check_cuda(cudaEventRecord(started, raw.stream), "cudaEventRecord");
    raw.all_reduce(count);
    check_cuda(cudaEventRecord(done, raw.stream), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(caller, done, 0), "cudaStreamWaitEvent");
  }
};

struct CallTime {
  double seconds;       // per call, the slowest rank's, from an idle device to an idle device
  double host_seconds;  // per call, to issue it on the host (the slowest rank's)
};

// `iterations` calls of `issue` after a warm-up.
CallTime time_calls(int iterations, const std::function<void()>& issue) {
  for (int i = 0; i < kWarmup; ++i) issue();
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) issue();
  const auto issued = std::chrono::steady_clock::now();
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const auto end = std::chrono::steady_clock::now();
  double times[2] = {std::chrono::duration<double>(end - start).count() / iterations,
                     std::chrono::duration<double>(issued - start).count() / iterations};
  MPI_Allreduce(MPI_IN_PLACE, times, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return {times[0], times[1]};
}

double busbw_gbps(int64_t bytes, double seconds, int ranks) {
  return static_cast<double>(bytes) / seconds * 2.0 * (ranks - 1) / ranks / 1e9;
}

// The communicator's result is right before it is timed.
void check_sum(Communicator& comm) {
  torch::Tensor ones = torch::ones({1000}, torch::device(comm.device()));
  comm.all_reduce(ones, ReduceOp::kSum)->wait();
  DTRAIN_CHECK(ones.eq(comm.size()).all().item<bool>(), "all_reduce of ones did not give {}",
               comm.size());
}

}  // namespace

int main(int argc, char* argv[]) {
  const dtrain::dist::WorldInfo world = dtrain::dist::init_world();
  std::vector<int64_t> sizes_mib = {1, 25, 256};
  if (argc > 1 && std::strcmp(argv[1], "--large") == 0) sizes_mib.push_back(1024);
  const int64_t max_bytes = sizes_mib.back() * kMiB;

  check_cuda(cudaSetDevice(world.local_rank), "cudaSetDevice");
  auto comm = dtrain::dist::make_nccl_world(world.local_rank, /*timeout_s=*/300.0);
  check_sum(*comm);
  RawNccl raw(world, max_bytes);
  Handshake handshake(raw, Handshake::Variant::kPlain);
  Handshake legacy(raw, Handshake::Variant::kLegacyCaller);
  Handshake timed(raw, Handshake::Variant::kTimingEvents);
  torch::Tensor tensor =
      torch::zeros({max_bytes / 4}, torch::dtype(torch::kFloat32).device(comm->device()));

  if (world.rank == 0) {
    fmt::print("all_reduce float32 sum in place, {} ranks; busbw = algbw x 2(n-1)/n; us per call\n",
               world.size);
    fmt::print("{:>9} {:>9} {:>10} {:>11} {:>8} {:>10} {:>9} {:>10} {:>10} {:>10} {:>10}\n",
               "size", "dtrain", "(host)", "dtrain GB/s", "raw", "raw GB/s", "ours/raw",
               "handshake", "+legacy", "+timing", "ours timed");
  }
  for (const int64_t mib : sizes_mib) {
    const int64_t bytes = mib * kMiB;
    const int64_t count = bytes / 4;
    // About 16 GiB moved per round: enough calls to time the small sizes well.
    const int iterations = static_cast<int>(std::clamp<int64_t>(16 * 1024 / mib, 20, 1000));
    torch::Tensor slice = tensor.narrow(0, 0, count);
    CallTime ours{1e30, 1e30};
    double reference = 1e30, plain = 1e30, on_legacy = 1e30, with_timing = 1e30;
    double ours_timed = 1e30;
    auto best = [&](double& so_far, Handshake& variant) {
      so_far = std::min(so_far,
                        time_calls(iterations, [&] { variant.all_reduce(count); }).seconds);
    };
    auto issue_ours = [&] { comm->all_reduce(slice, ReduceOp::kSum)->wait(); };
    for (int round = 0; round < kRounds; ++round) {
      // Untimed, as the trainer issues the steps whose figures it does not report.
      dtrain::dist::set_timing(false);
      const CallTime time = time_calls(iterations, issue_ours);
      dtrain::dist::set_timing(true);
      if (time.seconds < ours.seconds) ours = time;
      ours_timed = std::min(ours_timed, time_calls(iterations, issue_ours).seconds);
      reference = std::min(reference,
                           time_calls(iterations, [&] { raw.all_reduce(count); }).seconds);
      best(plain, handshake);
      best(on_legacy, legacy);
      best(with_timing, timed);
    }
    if (world.rank == 0) {
      fmt::print("{:>5} MiB {:>9.1f} {:>10.1f} {:>11.1f} {:>8.1f} {:>10.1f} {:>9.3f} {:>10.1f} "
                 "{:>10.1f} {:>10.1f} {:>10.1f}\n",
                 mib, ours.seconds * 1e6, ours.host_seconds * 1e6,
                 busbw_gbps(bytes, ours.seconds, world.size), reference * 1e6,
                 busbw_gbps(bytes, reference, world.size), reference / ours.seconds, plain * 1e6,
                 on_legacy * 1e6, with_timing * 1e6, ours_timed * 1e6);
    }
  }
  return 0;
}
