#include "dist/optimizer_state.h"

namespace dtrain::dist {

void save_optimizer(torch::optim::Optimizer& optimizer, const std::string& dir) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  archive.save_to(dir + "/optimizer.pt");
}

void load_optimizer(torch::optim::Optimizer& optimizer, const std::string& dir) {
  torch::serialize::InputArchive archive;
  archive.load_from(dir + "/optimizer.pt");
  optimizer.load(archive);
}

}  // namespace dtrain::dist
