#include "dist/factory.h"

#include "dist/single.h"

namespace dtrain::dist {

std::unique_ptr<Strategy> make_strategy(const DistOptions& options) {
  if (options.strategy == "single") return std::make_unique<SingleStrategy>();
  throw UserError("dist.strategy: \"" + options.strategy + "\" is not available in this build");
}

}  // namespace dtrain::dist
