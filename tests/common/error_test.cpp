#include "common/error.h"

#include <catch2/catch.hpp>

TEST_CASE("DTRAIN_CHECK names the rank, the file and the condition") {
  dtrain::set_error_rank(3);
  try {
    DTRAIN_CHECK(1 + 1 == 3, "arithmetic is off by {}", 1);
    FAIL("DTRAIN_CHECK did not throw");
  } catch (const dtrain::InternalError& e) {
    const std::string what = e.what();
    CHECK(what.find("rank 3") != std::string::npos);
    CHECK(what.find("error_test.cpp") != std::string::npos);
    CHECK(what.find("1 + 1 == 3") != std::string::npos);
    CHECK(what.find("arithmetic is off by 1") != std::string::npos);
  }
  dtrain::set_error_rank(0);
}
