// Between a checkpoint's whole-tensor optimizer state (what single and ddp write) and the
// servers' per-piece states (dist/ps/shard.h), for any optimizer, any plan and any number of
// servers: what lets a ps run resume on another number of servers or from another strategy.
#pragma once

#include "dist/comm/communicator.h"
#include "dist/ps/plan.h"
#include "dist/ps/shard.h"
#include "dist/ps/state_message.h"
#include "dist/strategy.h"

#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

// Every rank's shard state (PsShard::state()) on rank 0 of `comm`, by rank; empty on the other
// ranks. Collective: what a sharded strategy's prepare_checkpoint() gathers for
// whole_optimizer().
std::vector<ps::StateMessage> gather_states_on_rank0(Communicator& comm,
                                                     const ps::StateMessage& mine);

// What server `server` holds of `params` (the model's values) and of `whole`'s state (none
// where `whole` is null or keeps none for a tensor): the message PsShard::load_state() reads.
ps::StateMessage server_state(const PsPlan& plan, int server,
                              const std::vector<torch::Tensor>& params,
                              const torch::optim::Optimizer* whole);

// The optimizer over whole `params` whose state the servers' messages (PsShard::state(), by
// server index) hold in pieces.
std::unique_ptr<torch::optim::Optimizer> whole_optimizer(
    const PsPlan& plan, const std::vector<torch::Tensor>& params,
    const OptimizerFactory& make_optimizer, const std::vector<ps::StateMessage>& servers);

// Rank 0 of a colocated run: optimizer.pt (the whole optimizer assembled from the servers'
// `gathered` states) and ps_plan.txt (the plan as described at start) into `dir`.
void save_whole_state(const std::string& dir, const PsPlan& plan,
                      const std::vector<torch::Tensor>& params,
                      const std::vector<std::string>& names, const OptimizerFactory& make_optimizer,
                      const std::vector<ps::StateMessage>& gathered);
// `shard` (server `server` of `plan`) from the whole optimizer state in `dir` and the values
// of `params`; every rank reads the whole state and keeps its pieces.
void load_whole_state(const std::string& dir, const PsPlan& plan, int server,
                      const std::vector<torch::Tensor>& params,
                      const OptimizerFactory& make_optimizer, PsShard& shard);

}  // namespace dtrain::dist
