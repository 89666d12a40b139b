// MPI communicators over part of the world, for both backends' start-up (a device
// communicator over the ranks that have a device). Private to dist/comm/*.cpp (it includes
// mpi.h).
#pragma once

#include <mpi.h>

namespace dtrain::dist {

// World ranks [0, num_ranks), ranked as in the world: MPI_COMM_WORLD itself when they are all,
// else a communicator of their own, made by those ranks alone (the ranks after them never
// call; MPI_Comm_create_group) and freed by the caller. Blocking.
MPI_Comm first_world_ranks(int num_ranks);

}  // namespace dtrain::dist
