// Builds the strategy named in DistOptions over the world's communicator.
#pragma once

#include "dist/comm/communicator.h"
#include "dist/options.h"
#include "dist/strategy.h"

#include <memory>

namespace dtrain::dist {

std::unique_ptr<Strategy> make_strategy(const DistOptions& options,
                                        std::shared_ptr<Communicator> world);

}  // namespace dtrain::dist
