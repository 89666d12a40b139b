// MPI's view of tensors: the checked-call macro, each dtype's MPI datatype and sum. MPI has no
// 16-bit floats: float16 and bfloat16 travel as a 2-byte type of our own and are summed by
// user operations that add in float. Private to dist/comm/mpi_*.cpp (it includes mpi.h).
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

// The 16-bit float type and operations: created once, when MPI has started, and freed just
// before MPI_Finalize (MPI objects must not outlive it).
void create_half_types();
void free_half_types();

MPI_Datatype mpi_type(const torch::Tensor& tensor);
// MPI_SUM, or for float16 and bfloat16 the operation that adds in float and rounds back.
MPI_Op mpi_sum(const torch::Tensor& tensor);

}  // namespace dtrain::dist
