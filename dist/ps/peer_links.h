// The communicators of the parameter server's point-to-point transport (dist/ps/peer.h): four
// between every two ranks, one per direction and role, so that nothing one of them waits for
// holds up another. On NCCL each has a stream of its own, and a receive posted on one (a
// worker waiting for a round its server has not finished) never delays a send on another
// (that worker's pushes of the next step). A receive is posted a step ahead and spins on the
// device until its message comes, in every thread block it holds: on NCCL the links' kernels
// take at most `max_ctas` blocks each (dist.ps.link_ctas), so that with six such receives
// waiting at once on each GPU of four the compute keeps almost all of its SMs.
#pragma once

#include "dist/comm/communicator.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace dtrain::dist {

// The tag of every message: each link carries one kind of message, matched in order.
inline constexpr int kPeerLinkTag = 0;

struct PsPeerLinks {
  // This rank's worker side, used by the main thread.
  std::shared_ptr<Communicator> push_out;  // its gradients to the peer's server
  std::shared_ptr<Communicator> pull_in;   // the peer server's parameters to it
  // This rank's server side, used by the server's thread.
  std::shared_ptr<Communicator> push_in;   // the peer worker's gradients to it
  std::shared_ptr<Communicator> pull_out;  // its parameters to the peer worker
  int peer = 0;  // the peer's rank in each of the four
  std::shared_ptr<Communicator> pair;  // the four's parent, kept while they live (NCCL, MPI)
};

// Links to every other rank of `world`, indexed by world rank (this rank's own entry empty).
// Collective over `world`: the pairs are formed in rounds (a round-robin tournament), each
// round one split of the world into pairs, then four duplicates of each pair whose NCCL
// kernels take at most `max_ctas` thread blocks (0: NCCL's choice), each connected by a first
// message before the next round.
std::vector<PsPeerLinks> make_peer_links(Communicator& world, int max_ctas);

// Destroys the links in the order they were made, pair by pair in the tournament's rounds,
// each pair's four in the same order on both of its ranks: destroying an NCCL communicator
// may wait for its peer to destroy it too (two GPUs of one machine: cuMemRelease inside
// ncclCommDestroy), so ranks that went through their links in different orders would each
// wait for the other. `links` must be the only holder of them left.
void release_peer_links(std::vector<PsPeerLinks>& links, int me);

// The same four links over memory the ranks of one machine map from one another
// (dist/comm/shared_link.h, dist.ps.p2p_links = "shared"), where no GPU work waits for a peer.
// The ring of the link carrying rank `from`'s pushes to rank `to`'s server holds
// `capacity(from, to, false)` bytes; that of `from`'s server's parameters to `to`'s worker,
// `capacity(from, to, true)`. Collective over `world`; each link connected by a first message.
std::vector<PsPeerLinks> make_shared_peer_links(
    Communicator& world, const std::function<int64_t(int from, int to, bool pulls)>& capacity,
    double timeout_s);

}  // namespace dtrain::dist
