#include "dist/comm/mpi_types.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace dtrain::dist {

namespace {

// Written once by create_half_types(), before any communicator exists, and read afterwards.
MPI_Datatype g_half_type = MPI_DATATYPE_NULL;  // 2 bytes, for either 16-bit format
MPI_Op g_float16_sum = MPI_OP_NULL;
MPI_Op g_bfloat16_sum = MPI_OP_NULL;

// An MPI_User_function: inout[i] = in[i] + inout[i], added in float and rounded back to T, as
// NCCL does. `len` counts elements: the datatype is one element.
template <typename T>
void add_in_float(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = static_cast<T>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
  }
}

MPI_Datatype half_type() {
  DTRAIN_CHECK(g_half_type != MPI_DATATYPE_NULL,
               "16-bit floats on MPI before init_world() created their type");
  return g_half_type;
}

}  // namespace

void create_half_types() {
  static_assert(sizeof(c10::Half) == 2 && sizeof(c10::BFloat16) == 2);
  DTRAIN_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &g_half_type));
  DTRAIN_MPI_CHECK(MPI_Type_commit(&g_half_type));
  // Commutative: MPI may then combine the ranks' contributions in any order.
  DTRAIN_MPI_CHECK(MPI_Op_create(&add_in_float<c10::Half>, /*commute=*/1, &g_float16_sum));
  DTRAIN_MPI_CHECK(MPI_Op_create(&add_in_float<c10::BFloat16>, /*commute=*/1, &g_bfloat16_sum));
}

void free_half_types() {
  if (g_float16_sum != MPI_OP_NULL) MPI_Op_free(&g_float16_sum);
  if (g_bfloat16_sum != MPI_OP_NULL) MPI_Op_free(&g_bfloat16_sum);
  if (g_half_type != MPI_DATATYPE_NULL) MPI_Type_free(&g_half_type);
}

MPI_Datatype mpi_type(const torch::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case torch::kFloat32: return MPI_FLOAT;
    case torch::kFloat64: return MPI_DOUBLE;
    case torch::kFloat16: return half_type();
    case torch::kBFloat16: return half_type();
    case torch::kInt64: return MPI_INT64_T;
    case torch::kInt32: return MPI_INT32_T;
    case torch::kUInt8: return MPI_UINT8_T;
    default:
      DTRAIN_CHECK(false, "the MPI backend has no type for {}",
                   c10::toString(tensor.scalar_type()));
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_sum(const torch::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case torch::kFloat16: return g_float16_sum;
    case torch::kBFloat16: return g_bfloat16_sum;
    default: return MPI_SUM;
  }
}

}  // namespace dtrain::dist
