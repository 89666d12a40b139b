#include "dist/comm/gather.h"

#include "common/error.h"
#include "common/host_wait.h"

#include <cstring>
#include <utility>

namespace dtrain::dist {

namespace {

// The gathered elements, and how many each rank gave.
std::pair<torch::Tensor, std::vector<int64_t>> gather(Communicator& comm,
                                                      const torch::Tensor& input) {
  const torch::Tensor flat = input.contiguous().view({-1});
  const auto int64_options = torch::dtype(torch::kInt64).device(comm.device());
  torch::Tensor counts = torch::empty({comm.size()}, int64_options);
  comm.all_gather(torch::full({1}, flat.numel(), int64_options), counts)->wait();
  const torch::Tensor host_counts = to_host(counts);
  const int64_t* first = host_counts.data_ptr<int64_t>();
  std::vector<int64_t> by_rank(first, first + comm.size());
  torch::Tensor output = torch::empty({host_counts.sum().item<int64_t>()}, flat.options());
  comm.all_gather_v(flat, output, by_rank)->wait();
  return {output, std::move(by_rank)};
}

}  // namespace

torch::Tensor all_gather_variable(Communicator& comm, const torch::Tensor& input) {
  return gather(comm, input).first;
}

std::vector<std::string> all_gather_bytes(Communicator& comm, const std::string& bytes) {
  torch::Tensor mine = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  if (!bytes.empty()) std::memcpy(mine.data_ptr(), bytes.data(), bytes.size());
  const auto [gathered, counts] = gather(comm, mine.to(comm.device()));
  const torch::Tensor host = to_host(gathered);
  std::vector<std::string> all;
  const auto* next = reinterpret_cast<const char*>(host.data_ptr<uint8_t>());
  for (const int64_t count : counts) {
    all.emplace_back(next, static_cast<size_t>(count));
    next += count;
  }
  return all;
}

std::vector<int64_t> all_gather_v_offsets(const torch::Tensor& input, const torch::Tensor& output,
                                          const std::vector<int64_t>& counts, int rank) {
  DTRAIN_CHECK(rank >= 0 && static_cast<size_t>(rank) < counts.size(),
               "all_gather_v: {} counts for rank {}; pass one count per rank", counts.size(),
               rank);
  std::vector<int64_t> offsets{0};
  for (const int64_t count : counts) {
    DTRAIN_CHECK(count >= 0, "all_gather_v: a negative count {}", count);
    offsets.push_back(offsets.back() + count);
  }
  DTRAIN_CHECK(input.numel() == counts[static_cast<size_t>(rank)],
               "all_gather_v: rank {} gives {} elements, its count says {}", rank, input.numel(),
               counts[static_cast<size_t>(rank)]);
  DTRAIN_CHECK(output.numel() == offsets.back() && output.scalar_type() == input.scalar_type(),
               "all_gather_v output holds {} x {}, needs {} x {}", output.numel(),
               c10::toString(output.scalar_type()), offsets.back(),
               c10::toString(input.scalar_type()));
  return offsets;
}

}  // namespace dtrain::dist
