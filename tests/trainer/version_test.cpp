#include "trainer/version.h"

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

TEST_CASE("--version names dtrain and each library, one line each", "[version]") {
  std::istringstream report(dtrain::trainer::version_report());
  std::vector<std::string> lines;
  for (std::string line; std::getline(report, line);) lines.push_back(line);
  REQUIRE(lines.size() == 5);
  CHECK(lines[0] == "dtrain " + dtrain::trainer::dtrain_version());
  CHECK_THAT(dtrain::trainer::dtrain_version(), Catch::Matches(R"(\d+\.\d+\.\d+)"));
  CHECK_THAT(lines[1], Catch::StartsWith("LibTorch "));
  CHECK_THAT(lines[2], Catch::StartsWith("CUDA "));
  CHECK_THAT(lines[3], Catch::StartsWith("NCCL "));
  CHECK_THAT(lines[4], Catch::StartsWith("MPI "));
  CHECK(lines[4].size() > 4);
}
