#include "common/shared_kernels.h"

#include <catch2/catch.hpp>

TEST_CASE("Shared-kernel requests are taken one per layer, and cleared") {
  dtrain::clear_shared_kernel_requests();
  CHECK_FALSE(dtrain::take_shared_kernel_request());
  dtrain::request_shared_kernels(2);
  dtrain::request_shared_kernels(1);  // a second bucket's, before the first's were taken
  CHECK(dtrain::take_shared_kernel_request());
  CHECK(dtrain::take_shared_kernel_request());
  CHECK(dtrain::take_shared_kernel_request());
  CHECK_FALSE(dtrain::take_shared_kernel_request());
  dtrain::request_shared_kernels(4);
  dtrain::clear_shared_kernel_requests();  // a new backward: what was left does not carry
  CHECK_FALSE(dtrain::take_shared_kernel_request());
}

TEST_CASE("Standing communication is on between its set and its unset") {
  CHECK_FALSE(dtrain::standing_communication());
  dtrain::set_standing_communication(true);
  CHECK(dtrain::standing_communication());
  dtrain::set_standing_communication(false);
  CHECK_FALSE(dtrain::standing_communication());
}
