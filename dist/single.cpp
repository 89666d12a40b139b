#include "dist/single.h"

#include "dist/optimizer_state.h"
#include "optim/state_bytes.h"

namespace dtrain::dist {

void SingleStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  params_ = model.parameters();
  make_optimizer_ = make_optimizer;
  optimizer_ = make_optimizer(params_);
}

void SingleStrategy::step(double lr) {
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  optimizer_->step();
  optimizer_->zero_grad();
}

void SingleStrategy::save(const std::string& dir) const { save_optimizer(*optimizer_, dir); }

void SingleStrategy::load(const std::string& dir) {
  load_optimizer_state(dir, params_, 0, static_cast<int64_t>(params_.size()), make_optimizer_,
                       *optimizer_);
}

int64_t SingleStrategy::optimizer_state_bytes() const { return optim::state_bytes(*optimizer_); }

}  // namespace dtrain::dist
