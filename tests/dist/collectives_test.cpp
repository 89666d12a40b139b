// Each collective against its closed form, for any world size (run under mpirun -np 2/3/4),
// on odd sizes and several dtypes; on MPI (CPU), or on NCCL with DTRAIN_TEST_DEVICE=cuda. The
// parameter server's operations (receives from any rank, probes, a server thread) are MPI's
// alone: on NCCL those tests return at once, and one checks that NCCL refuses them.
#include "common/error.h"
#include "dist/comm/communicator.h"
#include "dist/comm/gather.h"
#include "test_device.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using dtrain::dist::Communicator;
using dtrain::dist::ReduceOp;

namespace {

Communicator& world() {
  static std::unique_ptr<Communicator> communicator =
      dtrain::dist::make_world_communicator(test_device(), 60.0);
  return *communicator;
}

// Rank r's input: r * 1000 + i, so every closed form below is exact in float. On the CPU,
// where the expected values are computed and compared.
torch::Tensor rank_values(int64_t n, int rank, torch::Dtype dtype) {
  return (torch::arange(n, torch::kFloat64) + 1000.0 * rank).to(dtype);
}

// `tensor` where the communicator takes its tensors (the same tensor on the CPU).
torch::Tensor on_device(const torch::Tensor& tensor) { return tensor.to(world().device()); }

torch::TensorOptions device_options(torch::Dtype dtype) {
  return torch::dtype(dtype).device(world().device());
}

double sum_of_ranks(int size) { return size * (size - 1) / 2.0; }

}  // namespace

TEST_CASE("all_reduce sums and averages in place", "[dist][collectives]") {
  Communicator& comm = world();
  const int64_t n = GENERATE(1, 7, 1001);
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kFloat64, torch::kInt64);
  torch::Tensor tensor = on_device(rank_values(n, comm.rank(), dtype));
  comm.all_reduce(tensor, ReduceOp::kSum)->wait();
  const torch::Tensor expected =
      (torch::arange(n, torch::kFloat64) * comm.size() + 1000.0 * sum_of_ranks(comm.size()))
          .to(dtype);
  CHECK(torch::equal(tensor.cpu(), expected));

  if (dtype != torch::kInt64) {
    torch::Tensor averaged = on_device(rank_values(n, comm.rank(), dtype));
    comm.all_reduce(averaged, ReduceOp::kAverage)->wait();
    CHECK(torch::allclose(averaged.cpu(), expected / comm.size()));
  }
}

TEST_CASE("reduce lands at the root, the other ranks' tensors unchanged", "[dist][collectives]") {
  Communicator& comm = world();
  const int root = comm.size() - 1;  // not 0: the root is not implied
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kFloat64, torch::kInt64);
  const ReduceOp op = GENERATE(ReduceOp::kSum, ReduceOp::kAverage);
  if (dtype == torch::kInt64 && op == ReduceOp::kAverage) return;  // integers are only summed
  torch::Tensor tensor = on_device(rank_values(5, comm.rank(), dtype));
  comm.reduce(tensor, root, op)->wait();
  torch::Tensor expected =
      torch::arange(5, torch::kFloat64) * comm.size() + 1000.0 * sum_of_ranks(comm.size());
  if (op == ReduceOp::kAverage) expected /= comm.size();
  const torch::Tensor unchanged = rank_values(5, comm.rank(), dtype);
  CHECK(torch::equal(tensor.cpu(), comm.rank() == root ? expected.to(dtype) : unchanged));
}

TEST_CASE("all_gather_v concatenates uneven inputs in rank order", "[dist][collectives]") {
  Communicator& comm = world();
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kInt64);
  // Rank 1 gives nothing; the others differ in length.
  auto count_of = [](int rank) -> int64_t { return rank == 1 ? 0 : 2 * rank + 1; };
  std::vector<int64_t> counts;
  for (int r = 0; r < comm.size(); ++r) counts.push_back(count_of(r));
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  torch::Tensor output = torch::full({total}, -1, device_options(dtype));
  comm.all_gather_v(on_device(rank_values(count_of(comm.rank()), comm.rank(), dtype)), output,
                    counts)
      ->wait();
  const torch::Tensor gathered = output.cpu();
  int64_t offset = 0;
  for (int r = 0; r < comm.size(); ++r) {
    CHECK(torch::equal(gathered.slice(0, offset, offset + counts[r]),
                       rank_values(counts[r], r, dtype)));
    offset += counts[r];
  }
}

TEST_CASE("all_gather_variable and all_gather_bytes gather lengths first", "[dist][collectives]") {
  Communicator& comm = world();
  const int64_t mine = comm.rank() == 1 ? 0 : comm.rank() + 2;
  const torch::Tensor gathered = dtrain::dist::all_gather_variable(
      comm, on_device(rank_values(mine, comm.rank(), torch::kFloat64)));
  std::vector<torch::Tensor> expected;
  for (int r = 0; r < comm.size(); ++r) {
    expected.push_back(rank_values(r == 1 ? 0 : r + 2, r, torch::kFloat64));
  }
  CHECK(torch::equal(gathered.cpu(), torch::cat(expected)));

  // Bytes, not C strings: a zero byte inside, and rank 1's string empty.
  auto text_of = [](int rank) {
    return rank == 1 ? std::string() : std::string(static_cast<size_t>(rank + 3), 'a') + '\0' +
                                           std::to_string(rank);
  };
  const std::vector<std::string> texts = dtrain::dist::all_gather_bytes(comm, text_of(comm.rank()));
  CHECK(texts.size() == static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size() && r < static_cast<int>(texts.size()); ++r) {
    CHECK(texts[static_cast<size_t>(r)] == text_of(r));
  }
}

TEST_CASE("16-bit floats: every operation, sums and averages", "[dist][collectives]") {
  Communicator& comm = world();
  const torch::Dtype dtype = GENERATE(torch::kFloat16, torch::kBFloat16);
  const int size = comm.size();
  const int root = size - 1;
  // Small integers and halves: exact in both formats (bfloat16 holds integers up to 256).
  auto values = [dtype](int64_t n, int rank) {
    return (torch::arange(n, torch::kFloat64).remainder(4) + rank).to(dtype);
  };
  auto as_double = [](const torch::Tensor& tensor) { return tensor.cpu().to(torch::kFloat64); };
  const torch::Tensor sum = torch::arange(7, torch::kFloat64).remainder(4) * size +
                            sum_of_ranks(size);
  // MPI divides the exact sum on arrival; NCCL scales each input by 1 / size on the way.
  auto check_average = [&](const torch::Tensor& actual, const torch::Tensor& expected) {
    if (comm.backend() == "mpi") {
      CHECK(torch::equal(as_double(actual), expected));
    } else {
      CHECK(torch::allclose(as_double(actual), expected, /*rtol=*/1e-2, /*atol=*/1e-2));
    }
  };

  torch::Tensor summed = on_device(values(7, comm.rank()));
  comm.all_reduce(summed, ReduceOp::kSum)->wait();
  CHECK(torch::equal(as_double(summed), sum));
  torch::Tensor averaged = on_device(values(7, comm.rank()));
  comm.all_reduce(averaged, ReduceOp::kAverage)->wait();
  check_average(averaged, sum / size);

  torch::Tensor reduced = on_device(values(7, comm.rank()));
  comm.reduce(reduced, root, ReduceOp::kSum)->wait();
  const torch::Tensor unchanged = as_double(values(7, comm.rank()));
  CHECK(torch::equal(as_double(reduced), comm.rank() == root ? sum : unchanged));

  // Block r of every rank's input is values(7, rank) shifted by 10 r.
  std::vector<torch::Tensor> blocks;
  for (int r = 0; r < size; ++r) blocks.push_back(values(7, comm.rank()) + 10 * r);
  const torch::Tensor blocked = on_device(torch::cat(blocks));
  torch::Tensor block_sum = torch::empty({7}, device_options(dtype));
  comm.reduce_scatter(blocked, block_sum, ReduceOp::kSum)->wait();
  CHECK(torch::equal(as_double(block_sum), sum + 10.0 * comm.rank() * size));
  comm.reduce_scatter(blocked, block_sum, ReduceOp::kAverage)->wait();
  check_average(block_sum, sum / size + 10.0 * comm.rank());

  std::vector<torch::Tensor> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(values(3, r));
  torch::Tensor gathered = torch::empty({3 * size}, device_options(dtype));
  comm.all_gather(on_device(values(3, comm.rank())), gathered)->wait();
  CHECK(torch::equal(gathered.cpu(), torch::cat(everyone)));
  const std::vector<int64_t> counts(static_cast<size_t>(size), 3);
  gathered.zero_();
  comm.all_gather_v(on_device(values(3, comm.rank())), gathered, counts)->wait();
  CHECK(torch::equal(gathered.cpu(), torch::cat(everyone)));

  torch::Tensor broadcast = on_device(values(5, comm.rank()));
  comm.broadcast(broadcast, root)->wait();
  CHECK(torch::equal(broadcast.cpu(), values(5, root)));

  const int previous = (comm.rank() + size - 1) % size;
  torch::Tensor incoming = torch::empty({4}, device_options(dtype));
  const torch::Tensor outgoing = on_device(values(4, comm.rank()));
  auto received = comm.recv(incoming, previous, 3);
  auto sent = comm.send(outgoing, (comm.rank() + 1) % size, 3);
  received->wait();
  sent->wait();
  CHECK(torch::equal(incoming.cpu(), values(4, previous)));
}

TEST_CASE("broadcast copies the root's tensor everywhere", "[dist][collectives]") {
  Communicator& comm = world();
  const int root = comm.size() - 1;
  torch::Tensor tensor = on_device(rank_values(13, comm.rank(), torch::kFloat32));
  comm.broadcast(tensor, root)->wait();
  CHECK(torch::equal(tensor.cpu(), rank_values(13, root, torch::kFloat32)));
}

TEST_CASE("all_gather concatenates in rank order", "[dist][collectives]") {
  Communicator& comm = world();
  const int64_t n = GENERATE(1, 5);
  torch::Tensor output = torch::empty({comm.size() * n}, device_options(torch::kFloat64));
  comm.all_gather(on_device(rank_values(n, comm.rank(), torch::kFloat64)), output)->wait();
  const torch::Tensor gathered = output.cpu();
  for (int r = 0; r < comm.size(); ++r) {
    CHECK(torch::equal(gathered.slice(0, r * n, (r + 1) * n), rank_values(n, r, torch::kFloat64)));
  }
}

TEST_CASE("reduce_scatter gives rank r the reduction of block r", "[dist][collectives]") {
  Communicator& comm = world();
  const int64_t n = GENERATE(1, 3);
  const ReduceOp op = GENERATE(ReduceOp::kSum, ReduceOp::kAverage);
  torch::Tensor input = on_device(rank_values(comm.size() * n, comm.rank(), torch::kFloat64));
  torch::Tensor output = torch::empty({n}, device_options(torch::kFloat64));
  comm.reduce_scatter(input, output, op)->wait();
  torch::Tensor expected = torch::arange(comm.rank() * n, (comm.rank() + 1) * n, torch::kFloat64) *
                               comm.size() +
                           1000.0 * sum_of_ranks(comm.size());
  if (op == ReduceOp::kAverage) expected /= comm.size();
  CHECK(torch::allclose(output.cpu(), expected));
}

TEST_CASE("send and recv pass a ring", "[dist][collectives]") {
  Communicator& comm = world();
  const int next = (comm.rank() + 1) % comm.size();
  const int previous = (comm.rank() + comm.size() - 1) % comm.size();
  torch::Tensor incoming = torch::empty({4}, device_options(torch::kInt64));
  // Named: a send's buffer must live until its wait.
  const torch::Tensor outgoing = on_device(rank_values(4, comm.rank(), torch::kInt64));
  auto received = comm.recv(incoming, previous, 7);
  auto sent = comm.send(outgoing, next, 7);
  received->wait();
  sent->wait();
  CHECK(torch::equal(incoming.cpu(), rank_values(4, previous, torch::kInt64)));
}

TEST_CASE("split forms sub-groups by color, ordered by key", "[dist][collectives]") {
  Communicator& comm = world();
  const int color = comm.rank() % 2;
  auto group = comm.split(color, -comm.rank());  // reversed order inside each group
  const int members = (comm.size() + 1 - color) / 2;
  CHECK(group->size() == members);
  torch::Tensor tensor = torch::ones({3}, device_options(torch::kFloat32));
  group->all_reduce(tensor, ReduceOp::kSum)->wait();
  CHECK(torch::equal(tensor.cpu(), torch::full({3}, static_cast<float>(members))));
  // Highest world rank first: this rank's place is the number of members above it.
  CHECK(group->rank() == (comm.size() - 1 - comm.rank()) / 2);
  comm.barrier();
}

TEST_CASE("dup keeps the members and ranks, in a matching space of its own",
          "[dist][collectives]") {
  Communicator& comm = world();
  auto copy = comm.dup();
  CHECK(copy->rank() == comm.rank());
  CHECK(copy->size() == comm.size());
  torch::Tensor tensor = on_device(rank_values(3, comm.rank(), torch::kFloat64));
  copy->all_reduce(tensor, ReduceOp::kSum)->wait();
  CHECK(torch::equal(tensor.cpu(), torch::arange(3, torch::kFloat64) * comm.size() +
                                       1000.0 * sum_of_ranks(comm.size())));
  copy->barrier();
}

TEST_CASE("a dup with one thread block per NCCL kernel moves the same data",
          "[dist][collectives]") {
  Communicator& comm = world();
  auto narrow = comm.dup_with_max_ctas(1);
  CHECK(narrow->rank() == comm.rank());
  CHECK(narrow->size() == comm.size());
  // 8 MiB: NCCL would spread it over several channels if it could.
  const int64_t n = 2 << 20;
  torch::Tensor summed = on_device(rank_values(n, comm.rank(), torch::kFloat32));
  narrow->all_reduce(summed, ReduceOp::kSum)->wait();
  CHECK(torch::equal(summed.cpu(), rank_values(n, 0, torch::kFloat32) * comm.size() +
                                       1000.0 * sum_of_ranks(comm.size())));
  // A ring of sends, the links' use of it.
  const int next = (comm.rank() + 1) % comm.size();
  const int previous = (comm.rank() + comm.size() - 1) % comm.size();
  torch::Tensor incoming = torch::empty({n}, device_options(torch::kFloat32));
  const torch::Tensor outgoing = on_device(rank_values(n, comm.rank(), torch::kFloat32));
  auto received = narrow->recv(incoming, previous, 0);
  auto sent = narrow->send(outgoing, next, 0);
  received->wait();
  sent->wait();
  CHECK(torch::equal(incoming.cpu(), rank_values(n, previous, torch::kFloat32)));
}

TEST_CASE("timing off: NCCL's time points measure nothing, the results stay right",
          "[dist][collectives]") {
  Communicator& comm = world();
  auto timed_ms = [&](bool timing) {
    dtrain::dist::set_timing(timing);
    torch::Tensor tensor = torch::ones({1000}, device_options(torch::kFloat32));
    const auto start = comm.now();
    auto work = comm.all_reduce(tensor, ReduceOp::kSum);
    work->wait();
    dtrain::dist::set_timing(true);
    CHECK(tensor.cpu().eq(comm.size()).all().item<bool>());
    return std::pair{work->started()->ms_until(*work->finished()),
                     start->ms_until(*work->finished())};
  };
  const auto [op_ms, span_ms] = timed_ms(true);
  CHECK(op_ms >= 0.0);
  CHECK(span_ms >= op_ms);
  const auto [untimed_op_ms, untimed_span_ms] = timed_ms(false);
  // MPI reads the host clock, which costs nothing: always timed.
  CHECK(std::isnan(untimed_op_ms) == (comm.backend() == "nccl"));
  CHECK(std::isnan(untimed_span_ms) == (comm.backend() == "nccl"));
}

TEST_CASE("NCCL refuses probes and receives from any rank", "[dist][collectives]") {
  Communicator& comm = world();
  if (comm.backend() != "nccl") return;
  torch::Tensor tensor = torch::empty({1}, device_options(torch::kFloat32));
  CHECK_THROWS_AS(comm.iprobe(dtrain::dist::kAnySource, 0), dtrain::UserError);
  CHECK_THROWS_AS(comm.probe(0, 0), dtrain::UserError);
  CHECK_THROWS_AS(comm.recv(tensor, dtrain::dist::kAnySource, 0), dtrain::UserError);
}

// The point-to-point operations of a parameter server, which only MPI has.
TEST_CASE("recv from any rank names each sender", "[dist][collectives]") {
  Communicator& comm = world();
  if (comm.backend() != "mpi") return;
  const int tag = 11;
  if (comm.rank() != 0) {
    comm.send(torch::tensor({int64_t{comm.rank()}, int64_t{10} * comm.rank()}), 0, tag)->wait();
    return;
  }
  std::vector<torch::Tensor> incoming;
  std::vector<std::unique_ptr<dtrain::dist::Work>> works;
  for (int r = 1; r < comm.size(); ++r) {
    incoming.push_back(torch::empty({2}, torch::kInt64));
    works.push_back(comm.recv(incoming.back(), dtrain::dist::kAnySource, tag));
  }
  std::vector<int> sources;
  for (size_t i = 0; i < works.size(); ++i) {
    works[i]->wait();
    const int source = works[i]->source();
    sources.push_back(source);
    CHECK(torch::equal(incoming[i], torch::tensor({int64_t{source}, int64_t{10} * source})));
  }
  std::sort(sources.begin(), sources.end());
  std::vector<int> others(static_cast<size_t>(comm.size() - 1));
  std::iota(others.begin(), others.end(), 1);
  CHECK(sources == others);
}

TEST_CASE("iprobe finds nothing until a message is pending; probe holds it for recv_probed",
          "[dist][collectives]") {
  Communicator& world_comm = world();
  if (world_comm.backend() != "mpi") return;
  auto comm = world_comm.dup();  // no stray messages of other tests
  CHECK_FALSE(comm->iprobe(dtrain::dist::kAnySource, dtrain::dist::kAnyTag).has_value());
  comm->barrier();  // nothing is sent before every rank has looked
  if (comm->rank() == 0) {
    comm->send(torch::tensor({1.5f, 2.5f, 3.5f}), 1, 5)->wait();
  } else if (comm->rank() == 1) {
    const dtrain::dist::Envelope envelope =
        comm->probe(dtrain::dist::kAnySource, dtrain::dist::kAnyTag);
    CHECK(envelope.source == 0);
    CHECK(envelope.tag == 5);
    CHECK(envelope.bytes == 3 * 4);
    // Matched: no longer visible to probes, yet received whole.
    CHECK_FALSE(comm->iprobe(0, 5).has_value());
    torch::Tensor tensor = torch::empty({envelope.bytes / 4}, torch::kFloat32);
    auto work = comm->recv_probed(envelope, tensor);
    work->wait();
    CHECK(work->source() == 0);
    CHECK(torch::equal(tensor, torch::tensor({1.5f, 2.5f, 3.5f})));
  }
  comm->barrier();
}

TEST_CASE("a server thread on a dup() answers requests while all_reduces run",
          "[dist][collectives]") {
  Communicator& comm = world();
  if (comm.backend() != "mpi") return;
  constexpr int kRequests = 5;  // per client
  constexpr int kRequestTag = 1;
  constexpr int kReplyTag = 2;
  auto control = comm.dup();  // on the main thread, by every rank
  // Rank 0 serves: request k of rank r is (r + k) % 3 + 1 numbers; the reply is their sum.
  std::vector<int> served_from;
  std::string server_error;
  std::thread server;
  if (comm.rank() == 0) {
    server = std::thread([&] {
      try {
        for (int i = 0; i < kRequests * (comm.size() - 1); ++i) {
          const dtrain::dist::Envelope request =
              control->probe(dtrain::dist::kAnySource, kRequestTag);
          torch::Tensor numbers = torch::empty({request.bytes / 8}, torch::kInt64);
          control->recv_probed(request, numbers)->wait();
          control->send(numbers.sum().reshape({1}), request.source, kReplyTag)->wait();
          served_from.push_back(request.source);
        }
      } catch (const std::exception& e) {
        server_error = e.what();
      }
    });
  }
  for (int k = 0; k < kRequests; ++k) {
    if (comm.rank() != 0) {
      const int64_t n = (comm.rank() + k) % 3 + 1;
      const torch::Tensor numbers = torch::full({n}, 100 * comm.rank() + k, torch::kInt64);
      control->send(numbers, 0, kRequestTag)->wait();
      torch::Tensor reply = torch::empty({1}, torch::kInt64);
      control->recv(reply, 0, kReplyTag)->wait();
      CHECK(reply.item<int64_t>() == n * (100 * comm.rank() + k));
    }
    // Meanwhile on the world's communicator, rank 0's main thread included.
    torch::Tensor tensor = rank_values(64, comm.rank(), torch::kFloat64);
    comm.all_reduce(tensor, ReduceOp::kSum)->wait();
    CHECK(torch::equal(tensor, torch::arange(64, torch::kFloat64) * comm.size() +
                                   1000.0 * sum_of_ranks(comm.size())));
  }
  if (server.joinable()) server.join();
  CHECK(server_error.empty());
  for (int r = 1; r < comm.size() && comm.rank() == 0; ++r) {
    CHECK(std::count(served_from.begin(), served_from.end(), r) == kRequests);
  }
  control->barrier();
}
