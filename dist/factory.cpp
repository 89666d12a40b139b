#include "dist/factory.h"

#include "dist/ddp/ddp.h"
#include "dist/ps/collective.h"
#include "dist/ps/peer.h"
#include "dist/ps/ps.h"
#include "dist/single.h"
#include "dist/zero/zero.h"
#include "dist/zero/zero2.h"
#include "dist/zero/zero3.h"

#include <fmt/format.h>

namespace dtrain::dist {

bool ps_uses_p2p(const PsOptions& ps, bool on_gpus) {
  const bool serve = ps.placement == "colocated" && !ps.hierarchical && ps.partial_reads();
  return ps.transport == "p2p" || (ps.transport == "auto" && on_gpus && serve);
}

void check_strategy(const DistOptions& options, int world_size, bool on_gpus) {
  if (options.strategy == StrategyKind::kSingle && world_size > 1) {
    throw UserError(fmt::format(
        "dist.strategy = \"single\" with {} ranks: each rank would train alone; use "
        "dist.strategy = \"ddp\", or start one rank",
        world_size));
  }
  if (options.strategy != StrategyKind::kPs) return;
  if (ps_uses_p2p(options.ps, on_gpus)) {
    if (options.compression.enabled()) {
      throw UserError(fmt::format(
          "dist.compression.kind = \"{}\" is not available over the parameter server's "
          "\"p2p\" transport, which \"auto\" picks on GPUs for ssp_reads = \"partial\"; "
          "set dist.ps.transport = \"messages\", or kind = \"none\"",
          options.compression.kind));
    }
    return;
  }
  if (options.ps.use_collectives(on_gpus) || options.ps.consistency != "ssp") return;
  if (options.ps.predict_weights) {
    throw UserError(
        "dist.ps.predict_weights = true needs the collective transport (placement "
        "\"colocated\", dist.ps.transport = \"collectives\"), which keeps the versions it "
        "extrapolates from; this run takes the messages transport");
  }
  if (options.ps.ssp_reads == "exact") {
    // The messages transport reads whatever has arrived, chunk by chunk.
    throw UserError(
        "dist.ps.ssp_reads = \"exact\" needs the collective transport (placement "
        "\"colocated\", dist.ps.transport = \"collectives\"); this run takes the messages "
        "transport, which reads what has arrived: use ssp_reads = \"newest\"");
  }
}

std::string describe_strategy(const DistOptions& options) {
  std::string text = strategy_name(options.strategy);
  if (options.strategy == StrategyKind::kZero) text += fmt::format(" stage {}", options.zero.stage);
  if (options.strategy == StrategyKind::kPs) {
    const PsOptions& ps = options.ps;
    text += " " + ps.consistency;
    if (ps.consistency == "ssp") text += fmt::format("({})", ps.staleness);
    text += ps.placement == "dedicated"
                ? fmt::format(", {} dedicated server{}", ps.servers, ps.servers == 1 ? "" : "s")
                : std::string(", colocated");
  }
  // A single rank reads no codec (the config warns); ZeRO stages 1 and 3 refuse one.
  if (options.strategy != StrategyKind::kSingle && options.compression.enabled()) {
    text += fmt::format(", {} compression", options.compression.kind);
  }
  return text;
}

std::unique_ptr<Strategy> make_strategy(const DistOptions& options,
                                        std::shared_ptr<Communicator> world) {
  const bool on_gpus = world->device().is_cuda();
  check_strategy(options, world->size(), on_gpus);
  if (options.strategy == StrategyKind::kSingle) return std::make_unique<SingleStrategy>(world);
  if (options.strategy == StrategyKind::kDdp) {
    return std::make_unique<DdpStrategy>(options.ddp, world, options.compression);
  }
  if (options.strategy == StrategyKind::kZero) {
    if (options.zero.stage == 2) {
      return std::make_unique<Zero2Strategy>(options.zero, world, options.compression);
    }
    if (options.zero.stage == 3) return std::make_unique<Zero3Strategy>(options.zero, world);
    return std::make_unique<ZeroStrategy>(world);
  }
  if (options.strategy == StrategyKind::kPs) {
    if (ps_uses_p2p(options.ps, on_gpus)) {
      return std::make_unique<PsPeerStrategy>(options.ps, world, options.timeout_s);
    }
    if (options.ps.use_collectives(on_gpus)) {
      return std::make_unique<PsCollectiveStrategy>(options.ps, world, options.compression);
    }
    return std::make_unique<PsStrategy>(options.ps, world, options.timeout_s, options.compression);
  }
  throw UserError(fmt::format("dist.strategy: \"{}\" is not available in this build",
                              strategy_name(options.strategy)));
}

}  // namespace dtrain::dist
