#include "dist/comm/nodes.h"

#include "common/error.h"

#include <fmt/format.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

namespace dtrain::dist {

std::optional<NodeLayout> layout_from_override(int rank, int size, const char* value) {
  if (value == nullptr || *value == '\0') return std::nullopt;
  char* end = nullptr;
  const long per_node = std::strtol(value, &end, 10);
  if (*end != '\0' || per_node < 1) {
    throw UserError(fmt::format("DTRAIN_RANKS_PER_NODE=\"{}\": expected a positive integer (the "
                                "world ranks each simulated node holds); unset it to detect "
                                "nodes from MPI",
                                value));
  }
  const int k = static_cast<int>(per_node);
  NodeLayout layout;
  layout.node = rank / k;
  layout.num_nodes = (size + k - 1) / k;
  layout.local_rank = rank % k;
  layout.local_size = std::min(k, size - layout.node * k);
  return layout;
}

NodeLayout detect_nodes(int rank, int size) {
  if (auto layout = layout_from_override(rank, size, std::getenv("DTRAIN_RANKS_PER_NODE"))) {
    return *layout;
  }
  NodeLayout layout;
  MPI_Comm local, leaders;
  DTRAIN_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                                   &local) == MPI_SUCCESS,
               "MPI_Comm_split_type failed");
  MPI_Comm_rank(local, &layout.local_rank);
  MPI_Comm_size(local, &layout.local_size);
  // Each node's lowest rank leads it; the leaders, in world order, number the nodes.
  const bool leader = layout.local_rank == 0;
  DTRAIN_CHECK(MPI_Comm_split(MPI_COMM_WORLD, leader ? 0 : MPI_UNDEFINED, rank, &leaders) ==
                   MPI_SUCCESS,
               "MPI_Comm_split failed");
  int numbering[2] = {0, 0};  // node, num_nodes
  if (leader) {
    MPI_Comm_rank(leaders, &numbering[0]);
    MPI_Comm_size(leaders, &numbering[1]);
    MPI_Comm_free(&leaders);
  }
  DTRAIN_CHECK(MPI_Bcast(numbering, 2, MPI_INT, 0, local) == MPI_SUCCESS, "MPI_Bcast failed");
  MPI_Comm_free(&local);
  layout.node = numbering[0];
  layout.num_nodes = numbering[1];
  (void)size;
  return layout;
}

bool world_on_one_machine() {
  MPI_Comm local;
  DTRAIN_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                   &local) == MPI_SUCCESS,
               "MPI_Comm_split_type failed");
  int local_size = 0, world_size = 0;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_free(&local);
  // The groups partition the world: all of it on every rank, or a part on every rank.
  return local_size == world_size;
}

}  // namespace dtrain::dist
