// What the parameter server's tests share on top of tests/dist/equivalence.h: options for
// float64 chunks, the number of workers a placement leaves, and a driver that runs workers
// through the loop's calls while dedicated servers serve.
#pragma once

#include "dist/options.h"
#include "dist/ps/ps.h"

#include "equivalence.h"

#include <functional>
#include <string>

namespace ps_harness {

using namespace equivalence;

// chunk_mb for chunks of `numel` float64 elements.
inline double chunk_mb(int64_t numel) {
  return static_cast<double>(numel * 8) / (1024.0 * 1024.0);
}

inline dtrain::dist::PsOptions ps_options(const std::string& placement, int64_t servers,
                                          int64_t chunk_numel,
                                          const std::string& consistency = "bsp",
                                          int64_t staleness = 0) {
  dtrain::dist::PsOptions options;
  options.placement = placement;
  options.servers = servers;
  options.chunk_mb = chunk_mb(chunk_numel);
  options.consistency = consistency;
  options.staleness = staleness;
  return options;
}

inline int workers(const dtrain::dist::PsOptions& options) {
  return options.placement == "dedicated" ? world()->size() - static_cast<int>(options.servers)
                                          : world()->size();
}

// Runs steps [from, to) on every worker of `strategy` (a server serves instead), then the
// end-of-training sync. `between`, if set, runs on each worker after each step.
inline void run(Net& net, dtrain::dist::PsStrategy& strategy, const Data& data, int64_t from,
                int64_t to, double lr, const std::function<void(int64_t)>& between = nullptr) {
  if (strategy.role() == dtrain::dist::Role::kServer) {
    strategy.serve();
    return;
  }
  for (int64_t step = from; step < to; ++step) {
    train(net, strategy, data, step, step + 1, lr, 1, strategy.data_group().rank);
    if (between) between(step);
  }
  strategy.finish();
}

}  // namespace ps_harness
