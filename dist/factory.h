// Builds the strategy named in DistOptions.
#pragma once

#include "dist/options.h"
#include "dist/strategy.h"

#include <memory>

namespace dtrain::dist {

std::unique_ptr<Strategy> make_strategy(const DistOptions& options);

}  // namespace dtrain::dist
