// Catch2 main of the multi-rank tests, run under mpirun: starts MPI, sends the reports of
// ranks other than 0 to their own files, and agrees on the exit code so every rank fails
// when any rank fails. With DTRAIN_TEST_LOG_DIR set, every rank also keeps a log there
// (rank<r>.log), where a stuck shared link makes every rank write its threads' stacks.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "common/log.h"
#include "dist/comm/mpi_communicator.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

int main(int argc, char* argv[]) {
  torch::set_num_threads(1);
  const dtrain::dist::WorldInfo world = dtrain::dist::init_world();
  Catch::Session session;
  if (const int status = session.applyCommandLine(argc, argv); status != 0) return status;
  if (world.rank != 0) {
    session.configData().outputFilename = "dist_tests.rank" + std::to_string(world.rank) + ".log";
  }
  if (const char* dir = std::getenv("DTRAIN_TEST_LOG_DIR")) {
    dtrain::log::open_file(fmt::format("{}/rank{}.log", dir, world.rank));
  }
  return dtrain::dist::max_over_world(session.run() != 0 ? 1 : 0);
}
