// Which ranks compute on the run's device and which hold state in host memory only, from the
// options and the world's size alone: the trainer asks before it picks a rank's device and
// builds the device's communicator over the ranks that have one.
#pragma once

#include "dist/options.h"

namespace dtrain::dist {

// Ranks [0, num_device_ranks) take data and compute on run.device; the ranks after them take
// no data and run on the CPU whatever run.device says (dist.ps.placement = "dedicated": the
// last dist.ps.servers ranks, the servers, which hold fp32 parameters and optimizer state).
struct RankPlacement {
  int world_size = 1;
  int num_device_ranks = 1;
  bool host_only(int rank) const { return rank >= num_device_ranks; }
};

// Throws a UserError where dedicated servers leave no worker.
RankPlacement place_ranks(const DistOptions& options, int world_size);
// The parameter server's roles: its workers are the device ranks.
RankPlacement place_ps_ranks(const PsOptions& options, int world_size);

}  // namespace dtrain::dist
