// The `single` strategy: one rank, no communication; the reference every other is tested against.
#pragma once

#include "dist/replicated.h"

namespace dtrain::dist {

class SingleStrategy : public ReplicatedStrategy {
 public:
  using ReplicatedStrategy::ReplicatedStrategy;

  std::string name() const override { return "single"; }
  void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) override;
  std::vector<torch::Tensor> gradient_owners() override { return params_; }
  void step(double lr) override;
  void save(const std::string& dir) const override;
  void load(const std::string& dir) override;
};

}  // namespace dtrain::dist
