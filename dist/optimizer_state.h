// Optimizer state in checkpoint directories, for strategies where a rank holds a whole
// optimizer (single, DDP).
#pragma once

#include <torch/torch.h>

#include <string>

namespace dtrain::dist {

void save_optimizer(torch::optim::Optimizer& optimizer, const std::string& dir);
void load_optimizer(torch::optim::Optimizer& optimizer, const std::string& dir);

}  // namespace dtrain::dist
