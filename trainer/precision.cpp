#include "trainer/precision.h"

#include "common/autocast.h"
#include "common/host_wait.h"

namespace dtrain::trainer {

AutocastScope::AutocastScope(const std::string& precision) {
  if (precision == "fp32") return;
  enabled_ = true;
  set_autocast(c10::DeviceType::CUDA, true, precision == "bf16" ? at::kBFloat16 : at::kHalf);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  // Cast weights are cached for the scope's duration only, as in Python's autocast.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast(c10::DeviceType::CUDA, false, at::kHalf);
}

LossScaler::LossScaler(torch::Device device, double initial_scale, int64_t growth_interval)
    : scale_(torch::full({1}, initial_scale, torch::dtype(torch::kFloat32).device(device))),
      growth_tracker_(torch::zeros({1}, torch::dtype(torch::kInt32).device(device))),
      found_inf_(torch::zeros({1}, torch::dtype(torch::kFloat32).device(device))),
      growth_interval_(growth_interval) {}

bool LossScaler::unscale_and_check(const std::vector<torch::Tensor>& params,
                                   const std::function<void(torch::Tensor)>& agree) {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& param : params) {
    if (param.grad().defined()) grads.push_back(param.grad());
  }
  found_inf_.zero_();
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, scale_.reciprocal());
  if (agree) agree(found_inf_);
  return to_host(found_inf_).item<float>() == 0.0f;
}

void LossScaler::update() {
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, 2.0, 0.5, growth_interval_);
}

double LossScaler::current_scale() const { return scale_.item<double>(); }

}  // namespace dtrain::trainer
