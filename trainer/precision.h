// Mixed precision on CUDA: an autocast scope for the forward pass (bf16 or fp16), and dynamic
// loss scaling for fp16 (what Python's torch.amp.GradScaler does, which C++ lacks).
#pragma once

#include <torch/torch.h>

#include <functional>

#include <string>
#include <vector>

namespace dtrain::trainer {

// Autocast to `precision` ("bf16" or "fp16") on CUDA while alive; "fp32": does nothing.
class AutocastScope {
 public:
  explicit AutocastScope(const std::string& precision);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_ = false;
};

// Dynamic loss scaling: scale() the loss before backward; unscale_and_check() divides the
// gradients by the scale on the device and returns whether they are all finite (this is the
// step's one host synchronisation, fp16 only). Where each rank holds only its shard of the
// gradients (ZeRO), `agree` sums the overflow flag over the ranks first, so that every rank
// skips the same steps and keeps the same scale. update() grows the scale after
// `growth_interval` finite steps and halves it after a step with inf/NaN.
class LossScaler {
 public:
  LossScaler(torch::Device device, double initial_scale = 65536.0, int64_t growth_interval = 2000);
  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  bool unscale_and_check(const std::vector<torch::Tensor>& params,
                         const std::function<void(torch::Tensor)>& agree = {});
  void update();
  double current_scale() const;

 private:
  torch::Tensor scale_;           // [1] float32 on the device
  torch::Tensor growth_tracker_;  // [1] int32 on the device
  torch::Tensor found_inf_;       // [1] float32 on the device
  int64_t growth_interval_;
};

}  // namespace dtrain::trainer
