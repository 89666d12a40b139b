#include "trainer/signals.h"

#include <catch2/catch.hpp>

#include <csignal>

using dtrain::trainer::resume_command;

TEST_CASE("the resume command replaces any --resume with a bare one", "[stop]") {
  CHECK(resume_command({"build/trainer", "--config", "a.toml"}, 1) ==
        "build/trainer --config a.toml --resume");
  CHECK(resume_command({"trainer", "--resume", "runs/x/checkpoints/step_6", "--config", "a.toml"},
                       2) == "mpirun -np 2 trainer --config a.toml --resume");
  CHECK(resume_command({"trainer", "--resume", "--set", "optim.lr=0.1"}, 1) ==
        "trainer --set optim.lr=0.1 --resume");
  CHECK(resume_command({"trainer", "--resume=runs/x", "--set", "run.name=it's mine"}, 1) ==
        "trainer --set 'run.name=it'\\''s mine' --resume");
}

TEST_CASE("a stop signal is recorded, not acted on, and the old handler returns", "[stop]") {
  const auto previous = std::signal(SIGUSR1, SIG_IGN);
  {
    const dtrain::trainer::StopSignals signals;
    CHECK(dtrain::trainer::StopSignals::received() == 0);
    std::raise(SIGUSR1);
    std::raise(SIGTERM);  // the first one counts
    CHECK(dtrain::trainer::StopSignals::received() == SIGUSR1);
    CHECK(dtrain::trainer::stop_exit_code(SIGUSR1) == 138);
    CHECK(dtrain::trainer::stop_exit_code(SIGTERM) == 143);
  }
  CHECK(std::signal(SIGUSR1, previous) == SIG_IGN);
}
