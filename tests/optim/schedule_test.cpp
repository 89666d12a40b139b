// LrSchedule against closed-form values: linear warmup, cosine, step and constant decay.
#include "optim/schedule.h"

#include <catch2/catch.hpp>

#include <cmath>

using dtrain::optim::LrSchedule;
using dtrain::optim::ScheduleOptions;

namespace {

ScheduleOptions schedule(const std::string& decay, double warmup_epochs = 0.0) {
  ScheduleOptions options;
  options.decay = decay;
  options.warmup_epochs = warmup_epochs;
  return options;
}

}  // namespace

TEST_CASE("constant schedule holds the peak", "[optim][schedule]") {
  const LrSchedule lr(schedule("constant"), 0.3, 10, 100);
  CHECK(lr.lr_at(0) == Approx(0.3).epsilon(1e-15));
  CHECK(lr.lr_at(99) == Approx(0.3).epsilon(1e-15));
  CHECK(lr.lr_at(1000) == Approx(0.3).epsilon(1e-15));
}

TEST_CASE("warmup is linear from peak x start factor to peak", "[optim][schedule]") {
  // 2 epochs x 10 steps = 20 warmup steps from 0.4 x 0.1 = 0.04 to 0.4.
  auto options = schedule("constant", 2.0);
  options.warmup_start_factor = 0.1;
  const LrSchedule lr(options, 0.4, 10, 100);
  CHECK(lr.lr_at(0) == Approx(0.04).epsilon(1e-12));
  CHECK(lr.lr_at(5) == Approx(0.04 + 0.36 * 0.25).epsilon(1e-12));
  CHECK(lr.lr_at(10) == Approx(0.22).epsilon(1e-12));
  CHECK(lr.lr_at(19) == Approx(0.04 + 0.36 * 0.95).epsilon(1e-12));
  CHECK(lr.lr_at(20) == Approx(0.4).epsilon(1e-12));

  SECTION("fractional epochs round to whole steps") {
    // 0.3 x 10 = 3 warmup steps, start factor 0: 0, 1/3, 2/3, then the peak.
    auto fractional = schedule("constant", 0.3);
    fractional.warmup_start_factor = 0.0;
    const LrSchedule short_warmup(fractional, 0.9, 10, 100);
    CHECK(short_warmup.lr_at(0) == 0.0);
    CHECK(short_warmup.lr_at(1) == Approx(0.3).epsilon(1e-12));
    CHECK(short_warmup.lr_at(2) == Approx(0.6).epsilon(1e-12));
    CHECK(short_warmup.lr_at(3) == Approx(0.9).epsilon(1e-12));
  }
}

TEST_CASE("cosine decays from peak to min_lr over the steps after warmup", "[optim][schedule]") {
  auto options = schedule("cosine");
  options.min_lr = 0.1;
  const LrSchedule lr(options, 1.0, 10, 100);
  // min + (peak - min) * (1 + cos(pi t / T)) / 2 with T = 100.
  CHECK(lr.lr_at(0) == Approx(1.0).epsilon(1e-12));
  CHECK(lr.lr_at(25) == Approx(0.8681980515339464).epsilon(1e-12));  // 0.1 + 0.45(1 + 1/sqrt 2)
  CHECK(lr.lr_at(50) == Approx(0.55).epsilon(1e-12));
  CHECK(lr.lr_at(75) == Approx(0.2318019484660536).epsilon(1e-12));  // 0.1 + 0.45(1 - 1/sqrt 2)
  const double pi = 3.14159265358979323846;
  CHECK(lr.lr_at(99) == Approx(0.1 + 0.45 * (1.0 + std::cos(pi * 0.99))).epsilon(1e-12));
  CHECK(lr.lr_at(99) < 0.1003);
  CHECK(lr.lr_at(100) == Approx(0.1).epsilon(1e-12));
  CHECK(lr.lr_at(500) == Approx(0.1).epsilon(1e-12));

  SECTION("after a warmup, t and T count from the warmup's end") {
    auto warm = options;
    warm.warmup_epochs = 1.0;  // 10 steps
    const LrSchedule warm_lr(warm, 1.0, 10, 110);
    CHECK(warm_lr.lr_at(9) == Approx(0.1 + 0.9 * 0.9).epsilon(1e-12));
    CHECK(warm_lr.lr_at(10) == Approx(1.0).epsilon(1e-12));
    CHECK(warm_lr.lr_at(60) == Approx(0.55).epsilon(1e-12));
    CHECK(warm_lr.lr_at(110) == Approx(0.1).epsilon(1e-12));
  }

  SECTION("a run no longer than its warmup stays finite and never decays") {
    auto long_warmup = options;
    long_warmup.warmup_epochs = 5.0;  // 50 steps of a 30-step run
    const LrSchedule short_run(long_warmup, 1.0, 10, 30);
    CHECK(short_run.lr_at(29) == Approx(0.1 + 0.9 * 29.0 / 50.0).epsilon(1e-12));
    CHECK(short_run.lr_at(50) == Approx(1.0).epsilon(1e-12));
    CHECK(short_run.lr_at(80) == Approx(1.0).epsilon(1e-12));
    const LrSchedule empty_run(long_warmup, 1.0, 10, 0);
    CHECK(std::isfinite(empty_run.lr_at(0)));
  }
}

TEST_CASE("step decay multiplies by gamma at each milestone epoch", "[optim][schedule]") {
  auto options = schedule("step");
  options.milestones = {2, 4};
  options.gamma = 0.1;
  const LrSchedule lr(options, 1.0, 10, 100);
  CHECK(lr.lr_at(0) == 1.0);
  CHECK(lr.lr_at(19) == 1.0);
  CHECK(lr.lr_at(20) == Approx(0.1).epsilon(1e-12));
  CHECK(lr.lr_at(39) == Approx(0.1).epsilon(1e-12));
  CHECK(lr.lr_at(40) == Approx(0.01).epsilon(1e-12));
  CHECK(lr.lr_at(99) == Approx(0.01).epsilon(1e-12));

  SECTION("warmup takes precedence over milestones inside it") {
    auto warm = options;
    warm.warmup_epochs = 3.0;
    warm.warmup_start_factor = 0.5;
    const LrSchedule warm_lr(warm, 1.0, 10, 100);
    CHECK(warm_lr.lr_at(20) == Approx(0.5 + 0.5 * 20.0 / 30.0).epsilon(1e-12));
    CHECK(warm_lr.lr_at(30) == Approx(0.1).epsilon(1e-12));
  }
}

TEST_CASE("what a run never reaches of its schedule is said", "[optim][schedule]") {
  auto options = schedule("step", 1.0);
  options.milestones = {2, 10, 12};
  CHECK(LrSchedule(options, 1.0, 10, 121).unreached().empty());  // step 120: epoch 12 begins
  const std::vector<std::string> short_run = LrSchedule(options, 1.0, 10, 100).unreached();
  REQUIRE(short_run.size() == 2);
  CHECK_THAT(short_run[0], Catch::Contains("epoch 10 (step 100) is past the run's last step, 99"));
  CHECK_THAT(short_run[1], Catch::Contains("epoch 12 (step 120)"));

  // 5 epochs of 10 steps to warm up, in a run of 20: the rate ends at 0.1 + 0.9 x 19/50.
  const std::vector<std::string> warm =
      LrSchedule(schedule("cosine", 5.0), 1.0, 10, 20).unreached();
  REQUIRE(warm.size() == 1);
  CHECK_THAT(warm[0], Catch::Contains("is 50 steps, longer than the run's 20") &&
                          Catch::Contains("ends at 0.442, never reaching optim.lr = 1"));
  CHECK(LrSchedule(schedule("cosine", 2.0), 1.0, 10, 20).unreached().empty());
}

TEST_CASE("poly decays as (1 - t/T)^power from peak to min_lr after warmup",
          "[optim][schedule]") {
  auto options = schedule("poly", 1.0);  // 10 warmup steps
  options.min_lr = 0.1;
  options.warmup_start_factor = 0.0;
  const LrSchedule lr(options, 1.0, 10, 110);  // T = 100 decay steps
  CHECK(lr.lr_at(0) == 0.0);
  CHECK(lr.lr_at(9) == Approx(0.9).epsilon(1e-12));
  CHECK(lr.lr_at(10) == Approx(1.0).epsilon(1e-12));  // t = 0: the peak
  CHECK(lr.lr_at(60) == Approx(0.1 + 0.9 * 0.25).epsilon(1e-12));  // (1 - 1/2)^2
  CHECK(lr.lr_at(109) == Approx(0.1 + 0.9 * 1e-4).epsilon(1e-12));  // (1/100)^2
  CHECK(lr.lr_at(110) == Approx(0.1).epsilon(1e-12));  // t = T: min_lr
  CHECK(lr.lr_at(1000) == Approx(0.1).epsilon(1e-12));

  SECTION("power is configurable") {
    auto linear = options;
    linear.power = 1.0;
    linear.min_lr = 0.0;
    const LrSchedule linear_lr(linear, 2.0, 10, 110);
    CHECK(linear_lr.lr_at(35) == Approx(1.5).epsilon(1e-12));
  }

  SECTION("a run no longer than its warmup never decays") {
    const LrSchedule short_run(options, 1.0, 10, 5);
    CHECK(short_run.lr_at(20) == Approx(1.0).epsilon(1e-12));
  }
}

TEST_CASE("schedule options are validated", "[optim][schedule]") {
  ScheduleOptions options;
  CHECK(options.validate().empty());
  options.decay = "linear";
  options.milestones = {30, 10};
  options.gamma = 2.0;
  options.power = 0.0;
  const auto errors = options.validate();
  std::vector<std::string> keys;
  for (const auto& error : errors) keys.push_back(error.key);
  CHECK(keys == std::vector<std::string>{"decay", "gamma", "power", "milestones"});
  CHECK_THROWS_AS(LrSchedule(options, 0.1, 10, 100), dtrain::UserError);
}
