#include "common/error.h"
#include "common/files.h"
#include "trainer/config.h"
#include "trainer/signals.h"
#include "trainer/train.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include <unistd.h>

namespace fs = std::filesystem;
using dtrain::trainer::resume_command;

TEST_CASE("the resume command replaces any --resume with a bare one", "[stop]") {
  CHECK(resume_command({"build/trainer", "--config", "a.toml"}, 1, {}) ==
        "build/trainer --config a.toml --resume");
  CHECK(resume_command({"trainer", "--resume", "runs/x/checkpoints/step_6", "--config", "a.toml"},
                       2, {}) == "mpirun -np 2 trainer --config a.toml --resume");
  CHECK(resume_command({"trainer", "--resume", "--set", "optim.lr=0.1"}, 1, {}) ==
        "trainer --set optim.lr=0.1 --resume");
  CHECK(resume_command({"trainer", "--resume=runs/x", "--set", "run.name=it's mine"}, 1, {}) ==
        "trainer --set 'run.name=it'\\''s mine' --resume");
}

TEST_CASE("the resume command keeps the launcher's options", "[stop]") {
  // mpirun's own command line (or scripts/mpirun.sh's) ends in the trainer's arguments.
  CHECK(resume_command({"/abs/build/trainer", "--config", "a.toml", "--resume"}, 4,
                       {"scripts/mpirun.sh", "-np", "4", "--enable-recovery", "build/trainer",
                        "--config", "a.toml", "--resume"}) ==
        "scripts/mpirun.sh -np 4 --enable-recovery build/trainer --config a.toml --resume");
  CHECK(resume_command({"trainer", "--config", "a b.toml"}, 2,
                       {"mpirun", "--oversubscribe", "-np", "2", "-x", "A=1", "trainer",
                        "--config", "a b.toml"}) ==
        "mpirun --oversubscribe -np 2 -x A=1 trainer --config 'a b.toml' --resume");
  // A launch line that does not end in them (another program's): the plain form.
  CHECK(resume_command({"trainer", "--config", "a.toml"}, 2, {"mpirun", "-np", "2", "other"}) ==
        "mpirun -np 2 trainer --config a.toml --resume");
}

TEST_CASE("a stop signal is recorded, not acted on, and the old handler returns", "[stop]") {
  const auto previous = std::signal(SIGUSR1, SIG_IGN);
  std::atomic<int> ended{0};
  {
    const dtrain::trainer::StopSignals signals([&ended](int signal) { ended = signal; });
    CHECK(dtrain::trainer::StopSignals::received() == 0);
    std::raise(SIGUSR1);
    std::raise(SIGUSR1);  // a repeat is harmless: SIGUSR1 may come both from mpirun and its script
    CHECK(dtrain::trainer::StopSignals::received() == SIGUSR1);
    CHECK(dtrain::trainer::stop_exit_code(SIGUSR1) == 138);
    CHECK(dtrain::trainer::stop_exit_code(SIGTERM) == 143);
  }
  CHECK(ended == 0);
  CHECK(std::signal(SIGUSR1, previous) == SIG_IGN);
}

TEST_CASE("a SIGINT or SIGTERM after a stop signal ends the run at once", "[stop]") {
  for (const int second : {SIGINT, SIGTERM}) {
    std::promise<int> ended;
    std::future<int> end = ended.get_future();
    const dtrain::trainer::StopSignals signals(
        [&ended](int signal) { ended.set_value(signal); });
    std::raise(SIGUSR1);
    std::raise(SIGUSR1);
    CHECK(end.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
    std::raise(second);  // on another thread: a handler may do next to nothing
    REQUIRE(end.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    CHECK(end.get() == second);
    CHECK(dtrain::trainer::StopSignals::received() == SIGUSR1);  // the first one counts
  }
}

TEST_CASE("a diverging run writes no checkpoint of NaN weights", "[stop]") {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST is not installed (package dataset-fashion-mnist); skipping");
    return;
  }
  const fs::path out =
      fs::temp_directory_path() / ("dtrain_stop_test." + std::to_string(getpid()));
  dtrain::remove_tree(out);
  for (const std::string mode : {"stop", "skip"}) {
    // lr 1000: the weights reach Inf within a few steps, then the loss turns NaN.
    const auto config = dtrain::trainer::load_config(
        "", {"run.out_dir=" + out.string(), "run.name=" + mode, "run.device=cpu",
             "run.num_threads=1", "run.log_every=5", "train.max_steps=40",
             "train.checkpoint_every=" + std::string(mode == "stop" ? "5" : "100"),
             "train.nonfinite=" + mode, "data.batch_size=16", "data.num_workers=0",
             "model.width=8", "optim.lr=1000", "schedule.warmup_epochs=0"});
    std::string error;
    try {
      dtrain::trainer::run_training(config, {});
    } catch (const dtrain::UserError& e) {
      error = e.what();
    }
    INFO(mode << ": " << error);
    CHECK_FALSE(fs::exists(out / mode / "checkpoints"));
    if (mode == "stop") {
      CHECK_THAT(error, Catch::Contains("the weights hold NaN or Inf, so they are not "
                                        "checkpointed"));
    } else {
      // The steps with a NaN loss were skipped, and counted.
      std::ifstream metrics(out / mode / "metrics.jsonl");
      std::stringstream text;
      text << metrics.rdbuf();
      CHECK_THAT(text.str(), Catch::Matches(R"([\s\S]*"loss/skipped_steps":[1-9][\s\S]*)"));
      CHECK_THAT(error, Catch::Contains("the loss was NaN or Inf at each, so each update was "
                                        "skipped: training diverged"));
    }
  }
  dtrain::remove_tree(out);
}
