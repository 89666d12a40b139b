// MPI's view of tensors: the checked-call macro and each dtype's MPI datatype. Private to
// dist/comm/mpi_*.cpp (it includes mpi.h).
#pragma once

#include "common/error.h"

#include <mpi.h>
#include <torch/torch.h>

#define DTRAIN_MPI_CHECK(call)                                                       \
  do {                                                                               \
    const int mpi_status = (call);                                                   \
    DTRAIN_CHECK(mpi_status == MPI_SUCCESS, "{} returned {}", #call, mpi_status);   \
  } while (0)

namespace dtrain::dist {

MPI_Datatype mpi_type(const torch::Tensor& tensor);

}  // namespace dtrain::dist
