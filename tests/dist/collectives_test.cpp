// Each collective against its closed form, for any world size (run under mpirun -np 2/3/4),
// on odd sizes and several dtypes; on MPI (CPU), or on NCCL with DTRAIN_TEST_DEVICE=cuda.
#include "dist/comm/communicator.h"
#include "test_device.h"

#include <catch2/catch.hpp>

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

TEST_CASE("all_reduce in half precision (NCCL only)", "[dist][collectives]") {
  Communicator& comm = world();
  if (comm.backend() != "nccl") return;  // MPI has no 16-bit float types
  const torch::Dtype dtype = GENERATE(torch::kFloat16, torch::kBFloat16);
  // Small integers: exact in both formats (bfloat16 holds integers up to 256 exactly).
  const torch::Tensor pattern = torch::arange(7, torch::kFloat64).remainder(4);
  torch::Tensor tensor = on_device((pattern + comm.rank()).to(dtype));
  comm.all_reduce(tensor, ReduceOp::kSum)->wait();
  const torch::Tensor expected = pattern * comm.size() + sum_of_ranks(comm.size());
  CHECK(torch::equal(tensor.cpu().to(torch::kFloat64), expected));

  torch::Tensor averaged = on_device((pattern + comm.rank()).to(dtype));
  comm.all_reduce(averaged, ReduceOp::kAverage)->wait();
  CHECK(torch::allclose(averaged.cpu().to(torch::kFloat64), expected / comm.size(),
                        /*rtol=*/1e-2, /*atol=*/1e-2));
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
