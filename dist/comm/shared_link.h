// Point-to-point links between the ranks of one machine through memory they map from one
// another (dist/comm/shared_regions.h), for the parameter server's p2p transport
// (dist.ps.p2p_links = "shared"). A link carries messages one way, matched in order: the
// sender copies each into a ring in the receiver's memory; the receiver copies it out into the
// tensor of its next receive, then gives the ring space back. Transfers are one-sided: a copy
// waits only for its own side's data and for room in the ring, and no work on a GPU ever
// waits for a peer. So nothing a GPU serializes (a pinned or device allocation, a command to
// the NULL stream, a kernel that needs every SM) can deadlock beside a transfer, as it does
// beside an NCCL receive posted ahead (docs/ARCHITECTURE.md, "What still threatens it").
//
// Each ring's control words (message descriptors, the counts published and consumed, the
// space freed) live in host shared memory, the rings in device memory on GPUs (CUDA IPC) and
// in host memory on CPU ranks. One thread per process moves every link along: it issues the
// copies (on GPUs on a stream of the link's own, after an event the caller's stream recorded
// when the operation was posted), publishes a message once its copy has completed, and frees
// ring space once the receiver's copy has. It also bounds every operation by the timeout:
// one overdue ends the job, naming it and what the peer had done.
#pragma once

#include "dist/comm/communicator.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::dist {

struct SharedLinkSpec {
  int from = 0;  // ranks of the communicator given to make_shared_links
  int to = 0;
  int64_t capacity = 0;  // bytes of its ring: at least its largest message
};

// Collective over `comm`, whose ranks share one machine: the links of `specs` (the same list
// on every rank), indexed as there, this rank's end of those that start or end here (null for
// the others). Each is a communicator of two ranks, ordered as in `comm`, that carries send()
// from `from` and recv() at `to`, tag 0, messages of up to its ring's capacity; its other
// operations throw UserError. Works: wait() blocks the host until the copy is queued, then,
// on GPUs, makes the current stream wait for it; test() says whether it has completed and
// been announced to the peer (a peer waiting for it needs nothing more of this rank).
std::vector<std::shared_ptr<Communicator>> make_shared_links(
    Communicator& comm, const std::vector<SharedLinkSpec>& specs, double timeout_s);

}  // namespace dtrain::dist
