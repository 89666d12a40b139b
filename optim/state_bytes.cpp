#include "optim/state_bytes.h"

#include "common/error.h"
#include "optim/lamb.h"
#include "optim/lars.h"

#include <initializer_list>

namespace dtrain::optim {

namespace {

int64_t bytes_of(std::initializer_list<torch::Tensor> tensors) {
  int64_t bytes = 0;
  for (const torch::Tensor& tensor : tensors) {
    if (tensor.defined()) bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  }
  return bytes;
}

}  // namespace

int64_t state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& entry : optimizer.state()) {
    const torch::optim::OptimizerParamState* state = entry.second.get();
    if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state)) {
      bytes += bytes_of({sgd->momentum_buffer()});
    } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state)) {
      bytes += bytes_of({adamw->exp_avg(), adamw->exp_avg_sq(), adamw->max_exp_avg_sq()});
    } else if (const auto* lars = dynamic_cast<const LarsParamState*>(state)) {
      bytes += bytes_of({lars->momentum_buffer()});
    } else if (const auto* lamb = dynamic_cast<const LambParamState*>(state)) {
      bytes += bytes_of({lamb->exp_avg(), lamb->exp_avg_sq()});
    } else {
      DTRAIN_CHECK(false, "state_bytes: an optimizer state of unknown type");
    }
  }
  return bytes;
}

int64_t state_tensors_per_parameter(const OptimizerOptions& options) {
  if (options.name == "sgd" || options.name == "lars") return options.momentum != 0.0 ? 1 : 0;
  if (options.name == "adamw" || options.name == "lamb") return 2;  // no amsgrad (optimizer.cpp)
  throw UserError("optim.name \"" + options.name + "\": state of an unknown optimizer");
}

}  // namespace dtrain::optim
