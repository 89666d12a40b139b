// The world's MPI communicator shared by the multi-rank tests of one binary (made once, on
// first use; 60 s timeout so that a broken test ends instead of hanging).
#pragma once

#include "dist/comm/mpi_communicator.h"

#include <memory>

inline std::shared_ptr<dtrain::dist::Communicator> mpi_world() {
  static std::shared_ptr<dtrain::dist::Communicator> communicator =
      dtrain::dist::make_mpi_world(60.0);
  return communicator;
}
