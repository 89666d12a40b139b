// Server 0's roll of the workers under dist.ps.tolerate_worker_loss: who is lost, and when a
// roll call is answered. Pure bookkeeping (the same on every rank of the mpirun).
#include "dist/ps/live_workers.h"

#include <catch2/catch.hpp>

using dtrain::dist::LiveWorkers;
using Clock = LiveWorkers::Clock;
using std::chrono::seconds;

TEST_CASE("a roll call is answered once every worker has called it", "[ps]") {
  const Clock::time_point t0;
  LiveWorkers roll(3, 10.0, t0);
  roll.called(0, t0);
  roll.called(2, t0);
  CHECK_FALSE(roll.answer(t0));
  roll.called(1, t0 + seconds(1));
  CHECK(roll.answer(t0 + seconds(1)));
  CHECK_FALSE(roll.answer(t0 + seconds(1)));  // once per roll call
  CHECK(roll.mask() == std::vector<int64_t>{1, 1, 1});
}

TEST_CASE("a worker silent for the timeout while others wait is lost", "[ps]") {
  const Clock::time_point t0;
  LiveWorkers roll(3, 10.0, t0);
  roll.heard(1, t0 + seconds(5));  // worker 1 pushed, then died
  roll.called(0, t0 + seconds(6));
  roll.called(2, t0 + seconds(6));
  CHECK(roll.find_lost(t0 + seconds(14)).empty());  // 9 s silent: not yet
  CHECK_FALSE(roll.answer(t0 + seconds(14)));
  CHECK(roll.find_lost(t0 + seconds(16)) == std::vector<size_t>{1});
  CHECK(roll.lost(1));
  CHECK(roll.live() == 2);
  CHECK(roll.answer(t0 + seconds(16)));
  CHECK(roll.mask() == std::vector<int64_t>{1, 0, 1});
  // The next roll call needs the survivors only.
  roll.called(0, t0 + seconds(20));
  roll.called(2, t0 + seconds(20));
  CHECK(roll.answer(t0 + seconds(20)));
}

TEST_CASE("silence while nobody waits loses no one", "[ps]") {
  const Clock::time_point t0;
  LiveWorkers roll(2, 10.0, t0);
  // Both evaluate for a minute: no roll call is pending.
  CHECK(roll.find_lost(t0 + seconds(60)).empty());
  // A worker that answers the roll late but within the timeout of its last word is kept.
  roll.called(0, t0 + seconds(60));
  roll.heard(1, t0 + seconds(55));
  CHECK(roll.find_lost(t0 + seconds(64)).empty());
  roll.called(1, t0 + seconds(64));
  CHECK(roll.answer(t0 + seconds(64)));
  CHECK(roll.live() == 2);
}

TEST_CASE("a worker's silence starts again when its roll call is answered", "[ps]") {
  const Clock::time_point t0;
  LiveWorkers roll(2, 5.0, t0);
  // Worker 0 calls and waits 4 s for worker 1: it cannot speak before the answer.
  roll.called(0, t0);
  roll.called(1, t0 + seconds(4));
  CHECK(roll.answer(t0 + seconds(4)));
  // Worker 1 calls the next roll at once; worker 0 evaluates for 4 s after the answer.
  roll.called(1, t0 + seconds(5));
  CHECK(roll.find_lost(t0 + seconds(8)).empty());  // 8 s since its call, 4 since the answer
  CHECK(roll.find_lost(t0 + seconds(10)) == std::vector<size_t>{0});
}
