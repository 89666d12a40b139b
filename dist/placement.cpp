#include "dist/placement.h"

#include <fmt/format.h>

namespace dtrain::dist {

RankPlacement place_ranks(const DistOptions& options, int world_size) {
  if (options.strategy == StrategyKind::kPs) return place_ps_ranks(options.ps, world_size);
  return {world_size, world_size};
}

RankPlacement place_ps_ranks(const PsOptions& options, int world_size) {
  if (options.placement != "dedicated") return {world_size, world_size};
  const int servers = static_cast<int>(options.servers);
  if (world_size - servers < 1) {
    throw UserError(fmt::format(
        "dist.ps.servers = {} dedicated servers leave no worker among {} rank(s); start more "
        "ranks (workers + servers) or use dist.ps.placement = \"colocated\"",
        servers, world_size));
  }
  return {world_size, world_size - servers};
}

}  // namespace dtrain::dist
