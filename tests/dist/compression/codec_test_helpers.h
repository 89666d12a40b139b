// What the codec tests share: sums over the ranks of the test world (equivalence.h) and the
// small codec settings they train with.
#pragma once

#include "dist/comm/communicator.h"
#include "dist/options.h"

#include "equivalence.h"

#include <torch/torch.h>

#include <string>

namespace codec_test {

// `tensor` summed (or averaged) over every rank, in place.
inline torch::Tensor summed(torch::Tensor tensor) {
  equivalence::world()->all_reduce(tensor, dtrain::dist::ReduceOp::kSum)->wait();
  return tensor;
}
inline torch::Tensor averaged(torch::Tensor tensor) {
  equivalence::world()->all_reduce(tensor, dtrain::dist::ReduceOp::kAverage)->wait();
  return tensor;
}

inline double max_abs(const torch::Tensor& tensor) {
  return tensor.numel() == 0 ? 0.0 : tensor.abs().max().item<double>();
}

// Settings small enough for the test net: top-k keeps 10%, PowerSGD rank 2, one-bit chunks of
// 16. `momentum`: top-k's DGC momentum correction (then what is sent is of the velocity).
inline dtrain::dist::CompressionOptions codec_options(const std::string& kind,
                                                      double momentum = 0.0) {
  dtrain::dist::CompressionOptions options;
  options.kind = kind;
  options.ratio = 0.1;
  options.rank = 2;
  options.chunk = 16;
  options.momentum = kind == "topk" ? momentum : 0.0;
  return options;
}

}  // namespace codec_test
