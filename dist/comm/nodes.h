// Which ranks share a machine (a "node"): those of one MPI_COMM_TYPE_SHARED group, numbered by
// their lowest world rank; or, when DTRAIN_RANKS_PER_NODE=k is set, consecutive blocks of k
// world ranks. The override lets one machine (CI) run several "nodes", so the node-local paths
// (a GPU per local rank, reduction within a node first) are exercised without a cluster.
#pragma once

#include <optional>
#include <string>

namespace dtrain::dist {

struct NodeLayout {
  int node = 0;        // this rank's node, 0 .. num_nodes - 1
  int num_nodes = 1;
  int local_rank = 0;  // rank among the processes of this node
  int local_size = 1;
};

// The layout DTRAIN_RANKS_PER_NODE = `value` gives world rank `rank` of `size`; nothing when
// `value` is null or empty. Throws UserError when it is not a positive integer.
std::optional<NodeLayout> layout_from_override(int rank, int size, const char* value);

// This rank's layout: the override if set, else MPI's shared-memory groups. Collective over
// MPI_COMM_WORLD (MPI started).
NodeLayout detect_nodes(int rank, int size);

// Whether every rank of MPI_COMM_WORLD runs on this machine, by MPI's shared-memory groups
// whatever DTRAIN_RANKS_PER_NODE says: whether they can map one another's memory. The same
// answer on every rank. Collective over MPI_COMM_WORLD.
bool world_on_one_machine();

}  // namespace dtrain::dist
