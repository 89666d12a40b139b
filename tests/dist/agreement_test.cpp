// The start-up agreement check: equal lines pass; a rank with a different value or an extra
// key stops every rank with a message naming that rank and key.
#include "common/error.h"
#include "dist/agreement.h"
#include "mpi_world.h"

#include <catch2/catch.hpp>

using Catch::Matchers::Contains;

namespace {

dtrain::dist::Communicator& world() { return *mpi_world(); }

}  // namespace

TEST_CASE("identical lines on every rank pass", "[dist][agreement]") {
  CHECK_NOTHROW(dtrain::dist::check_same_on_all_ranks(
      world(), "resolved config", {"train.epochs = 5", "data.batch_size = 128"}));
}

TEST_CASE("a rank with a different value is named with both values", "[dist][agreement]") {
  auto& comm = world();
  const int odd_one = comm.size() - 1;
  const std::string epochs = comm.rank() == odd_one ? "train.epochs = 3" : "train.epochs = 5";
  const std::string expected = "rank " + std::to_string(odd_one) + ": train.epochs = 3 (rank 0: 5)";
  // Every rank throws, not only the odd one: none is left waiting.
  CHECK_THROWS_WITH(dtrain::dist::check_same_on_all_ranks(
                        comm, "resolved config", {epochs, "data.batch_size = 128"}),
                    Contains("ranks disagree on the resolved config") && Contains(expected));
}

TEST_CASE("a rank with an extra or missing parameter is named", "[dist][agreement]") {
  auto& comm = world();
  std::vector<std::string> lines = {"fc.weight = 10x4 Float", "fc.bias = 10 Float"};
  if (comm.rank() == 1) lines.push_back("extra.weight = 3 Float");
  CHECK_THROWS_WITH(dtrain::dist::check_same_on_all_ranks(comm, "model parameters", lines),
                    Contains("rank 1: extra.weight = 3 Float (rank 0: absent)"));
}
