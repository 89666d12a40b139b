// NCCL's view of tensors: the checked-call macro, each dtype's NCCL type and each reduction's
// NCCL operation. Private to dist/comm/nccl_*.cpp (it includes nccl.h).
#pragma once

#include "common/error.h"
#include "dist/comm/communicator.h"

#include <nccl.h>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the NCCL backend needs NCCL 2.18 or newer (ncclCommSplit)"
#endif

#define DTRAIN_NCCL_CHECK(call)                                                    \
  do {                                                                             \
    const ncclResult_t nccl_status = (call);                                       \
    DTRAIN_CHECK(nccl_status == ncclSuccess, "{} failed: {} ({})", #call,          \
                 ncclGetErrorString(nccl_status), ncclGetLastError(nullptr));      \
  } while (0)

namespace dtrain::dist {

ncclDataType_t nccl_type(const torch::Tensor& tensor);

// NCCL averages inside the reduction (each input scaled by 1/size on the way).
inline ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kAverage ? ncclAvg : ncclSum; }

}  // namespace dtrain::dist
