// Open MPI backend of the Communicator: CPU tensors, non-blocking MPI collectives, every wait
// bounded by `timeout_s`. Also the process runtime: MPI start-up and the world's layout.
#pragma once

#include "dist/comm/communicator.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::dist {

struct WorldInfo {
  int rank = 0;
  int size = 1;
  // The machine this rank runs on (dist/comm/nodes.h: MPI's shared-memory groups, or the
  // DTRAIN_RANKS_PER_NODE override) and its place there.
  int node = 0;
  int num_nodes = 1;
  int local_rank = 0;
  int local_size = 1;
};

// Starts MPI once per process (later calls return the same answer); MPI is finalised at exit.
// Works without mpirun too, as a world of one. Asks for MPI_THREAD_MULTIPLE (communicator.h
// says what a lesser grant rules out).
WorldInfo init_world();
// init_world(), bounded: where it has not returned after `timeout_s` seconds, this rank prints
// one line and exits with code 3. MPI's start-up waits for every rank without a bound of its
// own, so a rank that never arrives (stopped, or killed where mpirun --enable-recovery keeps
// the others alive) would leave the others waiting for ever.
WorldInfo init_world_within(double timeout_s);

// The world's layout if init_world() has run and MPI is not yet finalised, else nothing. Never
// starts MPI: for error paths.
std::optional<WorldInfo> started_world();

// Whether MPI has been finalised (it cannot start again). Never starts MPI.
bool world_finalized();

// Whether mpirun keeps the job running when a rank dies (mpirun --enable-recovery, or the MCA
// parameter orte_enable_recovery, which mpirun hands on to the ranks).
bool world_survives_rank_loss();

// If the world survives rank loss, mpirun exits 0 whatever its ranks' exit codes: a non-zero
// `exit_code` is written to the file rank<N> of the directory $DTRAIN_EXIT_CODES, if set, for
// scripts/mpirun.sh to exit with.
void note_exit_code(int exit_code);

// Ends every rank of the world now (MPI_Abort; mpirun then exits with `exit_code`):
// for a rank that failed, so that the others do not wait for it until their timeout. If the
// world survives rank loss, ends this rank only (and notes `exit_code`).
[[noreturn]] void abort_world(int exit_code);

// The end of a run that every rank reached (a stop on a signal returns 128 + its number): the
// ranks agree on the largest exit code, and a non-zero one ends the world through abort_world,
// which mpirun reports by its exit code alone (each rank's own non-zero exit would add two
// banners). Returns `exit_code` as it is where MPI did not start, runs one rank, or survives
// rank loss (a lost rank would never agree).
int end_world(int exit_code);

// The largest `value` over all ranks of the world (blocking, unbounded: for agreeing on an
// exit code at the end of a run, when every rank is known to be alive).
int max_over_world(int value);

// The MPI library's own version line ("Open MPI v4.1.4, package: ..."). Needs no started MPI.
std::string mpi_library_version();

// The world's communicator, each wait bounded by `timeout_s` seconds.
std::unique_ptr<Communicator> make_mpi_world(double timeout_s);
// World ranks [0, num_ranks), ranked as in the world, each wait bounded by `timeout_s`.
// Collective over those ranks only: the ranks after them never call.
std::unique_ptr<Communicator> make_mpi_first_ranks(int num_ranks, double timeout_s);
// The ranks of this rank's node (WorldInfo::node), in world order. Collective over the world.
std::unique_ptr<Communicator> make_mpi_node(double timeout_s);

}  // namespace dtrain::dist
