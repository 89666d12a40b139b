// What `trainer --version` prints: dtrain's version and those of the libraries it was built
// with (LibTorch, CUDA, NCCL) and runs on (the MPI library).
#pragma once

#include <string>

namespace dtrain::trainer {

// "0.1.0"
std::string dtrain_version();
// One line per component, e.g. "dtrain 0.1.0", "LibTorch 2.1.2", "CUDA no (...)".
std::string version_report();

}  // namespace dtrain::trainer
