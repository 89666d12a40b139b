#include "dist/comm/nccl_types.h"

#include <fmt/format.h>

namespace dtrain::dist {

ncclDataType_t nccl_type(const torch::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case torch::kFloat32: return ncclFloat32;
    case torch::kFloat64: return ncclFloat64;
    case torch::kFloat16: return ncclFloat16;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kInt32: return ncclInt32;
    case torch::kInt64: return ncclInt64;
    case torch::kUInt8: return ncclUint8;
    default:
      throw_check_failure(__FILE__, __LINE__, "nccl_type(tensor)",
                          fmt::format("the NCCL backend has no type for {}",
                                      c10::toString(tensor.scalar_type())));
  }
}

}  // namespace dtrain::dist
