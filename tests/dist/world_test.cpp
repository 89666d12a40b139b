// The world's layout: which ranks share a node, from MPI's shared-memory groups or from the
// DTRAIN_RANKS_PER_NODE override (tests/CMakeLists.txt also runs this file as two "nodes" of
// two ranks), and the node communicator built from it.
#include "common/error.h"
#include "dist/comm/mpi_communicator.h"
#include "dist/comm/nodes.h"

#include "mpi_world.h"

#include <catch2/catch.hpp>

#include <cstdlib>

using dtrain::dist::layout_from_override;
using Catch::Matchers::Contains;

TEST_CASE("DTRAIN_RANKS_PER_NODE cuts the world into blocks", "[dist][world]") {
  CHECK_FALSE(layout_from_override(0, 4, nullptr).has_value());
  CHECK_FALSE(layout_from_override(0, 4, "").has_value());
  // 5 ranks, 2 per node: {0, 1} {2, 3} {4}.
  const auto last = layout_from_override(4, 5, "2");
  REQUIRE(last.has_value());
  CHECK(last->node == 2);
  CHECK(last->num_nodes == 3);
  CHECK(last->local_rank == 0);
  CHECK(last->local_size == 1);
  const auto second = layout_from_override(3, 5, "2");
  CHECK(second->node == 1);
  CHECK(second->local_rank == 1);
  CHECK(second->local_size == 2);
  CHECK_THROWS_WITH(layout_from_override(0, 4, "0"), Contains("positive integer"));
  CHECK_THROWS_WITH(layout_from_override(0, 4, "two"), Contains("DTRAIN_RANKS_PER_NODE"));
}

TEST_CASE("Every rank agrees on the node layout, and a node communicator spans its node",
          "[dist][world]") {
  const dtrain::dist::WorldInfo world = dtrain::dist::init_world();
  if (const char* value = std::getenv("DTRAIN_RANKS_PER_NODE")) {
    const auto expected = layout_from_override(world.rank, world.size, value);
    CHECK(world.node == expected->node);
    CHECK(world.num_nodes == expected->num_nodes);
    CHECK(world.local_rank == expected->local_rank);
    CHECK(world.local_size == expected->local_size);
  } else {  // mpirun on one machine: one node
    CHECK(world.num_nodes == 1);
    CHECK(world.local_rank == world.rank);
    CHECK(world.local_size == world.size);
  }
  std::shared_ptr<dtrain::dist::Communicator> node = dtrain::dist::make_mpi_node(60.0);
  CHECK(node->size() == world.local_size);
  CHECK(node->rank() == world.local_rank);
  // The node's world ranks are consecutive blocks in both layouts here: their sum is known.
  torch::Tensor ranks = torch::tensor({static_cast<int64_t>(world.rank)});
  node->all_reduce(ranks, dtrain::dist::ReduceOp::kSum)->wait();
  const int64_t first = world.rank - world.local_rank;
  const int64_t n = world.local_size;
  CHECK(ranks.item<int64_t>() == n * first + n * (n - 1) / 2);
  // Every rank counts the same nodes.
  torch::Tensor counts = torch::tensor({static_cast<int64_t>(world.num_nodes)});
  mpi_world()->all_reduce(counts, dtrain::dist::ReduceOp::kSum)->wait();
  CHECK(counts.item<int64_t>() == world.num_nodes * world.size);
  CHECK(world.node < world.num_nodes);
}
