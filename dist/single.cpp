#include "dist/single.h"

#include "dist/optimizer_state.h"

namespace dtrain::dist {

void SingleStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  hold(model);
  build_optimizer(params_, make_optimizer);
}

void SingleStrategy::step(double lr) { optimizer_step(lr); }

void SingleStrategy::save(const std::string& dir) const { save_optimizer(*optimizer_, dir); }

void SingleStrategy::load(const std::string& dir) {
  load_optimizer_state(dir, params_, 0, static_cast<int64_t>(params_.size()), make_optimizer_,
                       *optimizer_);
}

}  // namespace dtrain::dist
