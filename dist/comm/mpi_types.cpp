#include "dist/comm/mpi_types.h"

namespace dtrain::dist {

MPI_Datatype mpi_type(const torch::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case torch::kFloat32: return MPI_FLOAT;
    case torch::kFloat64: return MPI_DOUBLE;
    case torch::kInt64: return MPI_INT64_T;
    case torch::kInt32: return MPI_INT32_T;
    case torch::kUInt8: return MPI_UINT8_T;
    default:
      DTRAIN_CHECK(false, "the MPI backend has no type for {}",
                   c10::toString(tensor.scalar_type()));
  }
  return MPI_DATATYPE_NULL;
}

}  // namespace dtrain::dist
