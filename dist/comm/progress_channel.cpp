#include "dist/comm/progress_channel.h"

#include "common/error.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>
#include <vector>

namespace dtrain::dist {

namespace {

constexpr int kQueryTag = 1;
constexpr int kAnswerTag = 2;

// A channel may outlive MPI (a communicator destroyed at exit, after MPI_Finalize), and then
// must not touch it.
bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

}  // namespace

ProgressChannel::ProgressChannel(MPI_Comm comm) {
  DTRAIN_CHECK(MPI_Comm_dup(comm, &side_) == MPI_SUCCESS, "MPI_Comm_dup failed");
  MPI_Comm_rank(side_, &rank_);
  MPI_Comm_size(side_, &size_);
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(side_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> ranks(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) ranks[static_cast<size_t>(r)] = r;
  world_ranks_.assign(static_cast<size_t>(size_), -1);
  MPI_Group_translate_ranks(group, size_, ranks.data(), world, world_ranks_.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
}

ProgressChannel::~ProgressChannel() {
  if (!mpi_finalized()) MPI_Comm_free(&side_);
}

std::unique_ptr<ProgressChannel> ProgressChannel::split(int color, int key) const {
  MPI_Comm sub = MPI_COMM_NULL;
  DTRAIN_CHECK(MPI_Comm_split(side_, color, key, &sub) == MPI_SUCCESS, "MPI_Comm_split failed");
  auto channel = std::make_unique<ProgressChannel>(sub);
  MPI_Comm_free(&sub);
  return channel;
}

void ProgressChannel::answer_queries() {
  if (mpi_finalized()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  answer_queries_locked();
}

void ProgressChannel::answer_queries_locked() {
  for (;;) {
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, side_, &pending, &status);
    if (!pending) return;
    int64_t asked = 0;
    MPI_Recv(&asked, 1, MPI_INT64_T, status.MPI_SOURCE, kQueryTag, side_, MPI_STATUS_IGNORE);
    answers_.push_back(issued_.load());
    MPI_Request request;
    MPI_Isend(&answers_.back(), 1, MPI_INT64_T, status.MPI_SOURCE, kAnswerTag, side_, &request);
    MPI_Request_free(&request);
  }
}

std::string ProgressChannel::missing_ranks(int64_t sequence, double grace_s) {
  std::vector<int64_t> reached(static_cast<size_t>(size_), -1);
  reached[static_cast<size_t>(rank_)] = issued_.load();
  static const int64_t query = 0;  // the content is unused: the tag is the question
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      MPI_Request request;
      MPI_Isend(&query, 1, MPI_INT64_T, peer, kQueryTag, side_, &request);
      MPI_Request_free(&request);
    }
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(grace_s);
  int answered = 1;
  while (answered < size_ && Clock::now() < deadline) {
    bool received = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      answer_queries_locked();
      int pending = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, kAnswerTag, side_, &pending, &status);
      if (pending) {
        int64_t value = 0;
        MPI_Recv(&value, 1, MPI_INT64_T, status.MPI_SOURCE, kAnswerTag, side_,
                 MPI_STATUS_IGNORE);
        auto& slot = reached[static_cast<size_t>(status.MPI_SOURCE)];
        if (slot < 0) ++answered;
        slot = value;
        received = true;
      }
    }
    if (!received) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string missing;
  for (int peer = 0; peer < size_; ++peer) {
    const int64_t peer_reached = reached[static_cast<size_t>(peer)];
    if (peer_reached >= sequence) continue;
    if (!missing.empty()) missing += ", ";
    missing += peer_reached < 0 ? fmt::format("{} (no answer)", world_rank(peer))
                                : fmt::format("{} (at #{})", world_rank(peer), peer_reached);
  }
  return missing.empty() ? "none found" : missing;
}

bool mpi_threads_multiple() {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level >= MPI_THREAD_MULTIPLE;
}

}  // namespace dtrain::dist
