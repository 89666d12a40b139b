// Builds the strategy named in DistOptions over the world's communicator.
#pragma once

#include "dist/comm/communicator.h"
#include "dist/options.h"
#include "dist/strategy.h"

#include <memory>
#include <string>

namespace dtrain::dist {

// Whether the parameter server runs over point-to-point links on the device (dist/ps/peer.h):
// transport "p2p", or "auto" on GPUs for colocated partial reads. `on_gpus`: the workers'
// device.
bool ps_uses_p2p(const PsOptions& ps, bool on_gpus);

// What make_strategy refuses once the world's size and the workers' device are known (the
// transport "auto" picks depends on the device): throws UserError. The dry run calls it for a
// world it only imagines.
void check_strategy(const DistOptions& options, int world_size, bool on_gpus);

// The strategy as the start-up banner and a checkpoint's state.toml name it, with what makes
// it one of its kind: "ddp", "zero stage 2", "ps ssp(2), 2 dedicated servers", and the codec
// where one compresses the gradients ("ddp, topk compression").
std::string describe_strategy(const DistOptions& options);

std::unique_ptr<Strategy> make_strategy(const DistOptions& options,
                                        std::shared_ptr<Communicator> world);

}  // namespace dtrain::dist
