#include "dist/comm/mpi_groups.h"

#include "dist/comm/mpi_types.h"

namespace dtrain::dist {

MPI_Comm first_world_ranks(int num_ranks) {
  int world_size = 0, rank = 0;
  DTRAIN_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  DTRAIN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  DTRAIN_CHECK(num_ranks >= 1 && num_ranks <= world_size && rank < num_ranks,
               "a communicator over world ranks 0-{} is made by those ranks only; rank {} of {} "
               "called",
               num_ranks - 1, rank, world_size);
  if (num_ranks == world_size) return MPI_COMM_WORLD;
  MPI_Group world_group = MPI_GROUP_NULL;
  MPI_Group members = MPI_GROUP_NULL;
  DTRAIN_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  int range[1][3] = {{0, num_ranks - 1, 1}};  // first, last, stride
  DTRAIN_MPI_CHECK(MPI_Group_range_incl(world_group, 1, range, &members));
  MPI_Comm comm = MPI_COMM_NULL;
  DTRAIN_MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, members, /*tag=*/0, &comm));
  DTRAIN_MPI_CHECK(MPI_Group_free(&members));
  DTRAIN_MPI_CHECK(MPI_Group_free(&world_group));
  return comm;
}

}  // namespace dtrain::dist
