// NCCL backend of the Communicator: CUDA tensors of one device, one rank per GPU. Operations
// run on the communicator's own high-priority stream, ordered against the compute stream by
// CUDA events; the host never blocks on them (barrier() excepted), and a watchdog thread ends
// the job when one does not complete within the timeout.
//
// Each operation, as issued on the host:
//   1. an event recorded on the current (compute) stream makes the comm stream wait for the
//      work issued before, which produced the operation's inputs;
//   2. on the comm stream: the `started` event, the NCCL call, the `finished` event;
//   3. the tensors are marked as used by the comm stream, so the caching allocator does not
//      hand their memory out again before the operation is done, even if they are freed
//      first;
//   4. the watchdog polls `finished`: past `timeout_s` it logs the operation and its sequence
//      number, aborts the NCCL communicator and calls MPI_Abort.
// Work::wait() makes the current stream wait for `finished` (step 2), and returns at once.
// An operation issued while the current stream is being captured into a CUDA graph (the
// trainer's step with DDP's hooks inside) takes part in the capture through the same events,
// untimed and unwatched: its graph's next watched operation bounds each replay.
//
// Point to point: NCCL ignores tags; sends and receives between two ranks match in the order
// they were posted. Posted sends and receives are held back on the host and launched together,
// as one NCCL group, by the first wait() or test() on any of them (or by the communicator's
// destructor): a rank posts all of an exchange, receives and sends in any order, before it
// waits, or the exchange deadlocks, as on MPI when a blocking receive precedes the matching
// send. A point-to-point Work launches through its communicator, so it must not outlive it.
// NCCL cannot receive from any rank or probe: those throw a UserError (use an MPI communicator).
// all_gather_v is one group of broadcasts, one per rank that gives elements.
#pragma once

#include "dist/comm/communicator.h"

#include <memory>

namespace dtrain::dist {

// The world's communicator on CUDA device `device_index`, this rank's GPU. Collective and
// blocking over every rank of the world: rank 0 creates NCCL's unique id and broadcasts it over
// MPI (started with init_world()); bounded by `timeout_s`, as every operation.
std::unique_ptr<Communicator> make_nccl_world(int device_index, double timeout_s);
// The same over world ranks [0, num_ranks) only (ranked as in the world; rank 0 creates the
// id): collective over those ranks, the ranks after them never call. For workers beside
// dedicated CPU parameter servers, which hold no GPU.
std::unique_ptr<Communicator> make_nccl_first_ranks(int device_index, double timeout_s,
                                                    int num_ranks);

}  // namespace dtrain::dist
