#include "dist/single.h"

#include "common/error.h"

namespace dtrain::dist {

void SingleStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  params_ = model.parameters();
  optimizer_ = make_optimizer(params_);
}

void SingleStrategy::step(double lr) {
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  optimizer_->step();
  optimizer_->zero_grad();
}

void SingleStrategy::save(const std::string& dir) const {
  torch::serialize::OutputArchive archive;
  optimizer_->save(archive);
  archive.save_to(dir + "/optimizer.pt");
}

void SingleStrategy::load(const std::string& dir) {
  torch::serialize::InputArchive archive;
  archive.load_from(dir + "/optimizer.pt");
  optimizer_->load(archive);
}

}  // namespace dtrain::dist
