// The `single` strategy: one rank, no communication; the reference every other is tested against.
#pragma once

#include "dist/strategy.h"

namespace dtrain::dist {

class SingleStrategy : public Strategy {
 public:
  std::string name() const override { return "single"; }
  void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) override;
  std::vector<torch::Tensor> gradient_owners() override { return params_; }
  void step(double lr) override;
  void save(const std::string& dir) const override;
  void load(const std::string& dir) override;
  int64_t optimizer_state_bytes() const override;

 private:
  std::vector<torch::Tensor> params_;
  OptimizerFactory make_optimizer_;  // load() rebuilds a sharded writer's optimizers with it
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace dtrain::dist
