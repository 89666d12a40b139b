#include "common/error.h"
#include "common/files.h"
#include "trainer/config.h"
#include "trainer/metrics.h"
#include "trainer/resume.h"
#include "trainer/run_dir.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <unistd.h>

namespace fs = std::filesystem;
using dtrain::UserError;
using dtrain::trainer::RunShape;

namespace {

// Per process: test runs of other checkouts on this machine use the same temp directory.
const fs::path kRoot =
    fs::temp_directory_path() / ("dtrain_run_dir_test." + std::to_string(getpid()));
struct RemoveAtExit {
  ~RemoveAtExit() { dtrain::remove_tree(kRoot); }
} remove_at_exit;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = kRoot / name;
  dtrain::remove_tree(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void make_checkpoint(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "DONE");
}

RunShape shape(const std::vector<std::string>& overrides, int64_t world, int64_t global_batch,
               int64_t steps_per_epoch, int64_t total_steps) {
  return {dtrain::trainer::load_config("", overrides), world, global_batch, steps_per_epoch,
          total_steps};
}

}  // namespace

TEST_CASE("a directory holding a run is refused without --resume", "[run_dir]") {
  const fs::path run = fresh_dir("taken");
  CHECK_NOTHROW(dtrain::trainer::check_run_dir(run.string(), std::nullopt));  // empty
  std::ofstream(run / "metrics.jsonl") << "{}\n";
  CHECK(dtrain::trainer::holds_run(run.string()));
  CHECK_THROWS_WITH(dtrain::trainer::check_run_dir(run.string(), std::nullopt),
                    run.string() + " already holds a run; pass --resume to continue it or "
                                   "choose another run.name");
  CHECK_NOTHROW(dtrain::trainer::check_run_dir(run.string(), std::string()));
  CHECK_NOTHROW(
      dtrain::trainer::check_run_dir(run.string(), (run / "checkpoints" / "step_1").string()));
  CHECK_THROWS_AS(dtrain::trainer::check_run_dir(run.string(), fresh_dir("other").string()),
                  UserError);
}

TEST_CASE("a metrics.csv alone marks a run too (a new run would append to it)", "[run_dir]") {
  const fs::path run = fresh_dir("csv_only");
  std::ofstream(run / "metrics.csv") << "x\n";
  CHECK(dtrain::trainer::holds_run(run.string()));
}

TEST_CASE("--resume offers a checkpoint, or a run's checkpoints newest first", "[run_dir]") {
  const fs::path run = fresh_dir("offers");
  make_checkpoint(run / "checkpoints" / "step_00000006");
  make_checkpoint(run / "checkpoints" / "step_00000012");
  fs::create_directories(run / "checkpoints" / "step_00000018.tmp");
  const std::vector<std::string> newest_first = {
      (run / "checkpoints" / "step_00000012").string(),
      (run / "checkpoints" / "step_00000006").string()};

  const auto bare = dtrain::trainer::resume_from(run.string(), "");
  CHECK(bare.checkpoints == newest_first);
  CHECK(bare.fall_back);
  const auto by_dir = dtrain::trainer::resume_from("elsewhere", run.string());
  CHECK(by_dir.checkpoints == newest_first);
  CHECK(by_dir.fall_back);
  const auto one = dtrain::trainer::resume_from("elsewhere", newest_first[1]);
  CHECK(one.checkpoints == std::vector<std::string>{newest_first[1]});
  CHECK_FALSE(one.fall_back);
  // Its checkpoints/ folder stands for the run.
  for (const std::string& folder :
       {(run / "checkpoints").string(), (run / "checkpoints/").string()}) {
    CHECK(dtrain::trainer::resume_from("elsewhere", folder).checkpoints == newest_first);
  }
  CHECK_THROWS_WITH(dtrain::trainer::resume_from("elsewhere", (run / "missing").string()),
                    "--resume " + (run / "missing").string() + ": no such file or directory");
  fs::create_directories(run / "nothing");
  CHECK_THROWS_WITH(dtrain::trainer::resume_from("elsewhere", (run / "nothing").string()),
                    Catch::Contains("neither a complete checkpoint (no DONE) nor a run"));

  // A checkpoint copied without its DONE (its config.toml aside, not a run directory).
  const fs::path unfinished = fresh_dir("unfinished");
  for (const char* name : {"config.toml", "state.toml", "model.pt"}) std::ofstream(unfinished / name);
  CHECK_THROWS_WITH(dtrain::trainer::resume_from("elsewhere", unfinished.string()),
                    Catch::Contains("an incomplete checkpoint (no DONE"));
}

TEST_CASE("metrics of a resumed run keep the records up to its checkpoint", "[run_dir]") {
  const fs::path path = fresh_dir("metrics") / "metrics.jsonl";
  {
    dtrain::trainer::MetricsWriter metrics(path.string());
    for (int64_t step : {10, 20, 30}) metrics.write("step", step, {{"loss/train", 1.0}});
    metrics.write("eval", 30, {});
    metrics.write("final", 30, {});
  }
  std::ofstream(path, std::ios::app) << "{\"kind\":\"step\",\"st";  // cut short by a crash
  dtrain::trainer::MetricsWriter metrics(path.string());
  metrics.resume_at(20);
  metrics.write("step", 25, {});
  CHECK(read_text(path) ==
        "{\"kind\":\"step\",\"step\":10,\"loss/train\":1.0}\n"
        "{\"kind\":\"step\",\"step\":20,\"loss/train\":1.0}\n"
        "{\"kind\":\"step\",\"step\":25}\n");
}

TEST_CASE("resuming says what a changed world, batch or schedule changes", "[run_dir]") {
  const RunShape saved = shape({"data.batch_size=64"}, 2, 128, 468, 2340);
  CHECK(dtrain::trainer::resume_changes(saved, saved, 1000).empty());

  // Four ranks of 32: the same global batch, so only each rank's batch changes.
  const auto same_batch = dtrain::trainer::resume_changes(
      saved, shape({"data.batch_size=32"}, 4, 128, 468, 2340), 1000);
  REQUIRE(same_batch.size() == 1);
  CHECK(same_batch[0] ==
        "2 -> 4 rank(s) x data.batch_size 64 -> 32 x train.grad_accum 1 -> 1 with the same "
        "global batch 128: the data order continues, but BatchNorm takes its statistics over 32 "
        "samples instead of 64 (each rank's micro-batch)");
  // One rank of 64 accumulating two micro-batches: BatchNorm sees 64 samples, as before.
  CHECK(dtrain::trainer::resume_changes(
            saved, shape({"data.batch_size=64", "train.grad_accum=2"}, 1, 128, 468, 2340), 1000)
            .empty());
  // The same ranks, the micro-batch split differently: BatchNorm's batch halves.
  const auto split = dtrain::trainer::resume_changes(
      saved, shape({"data.batch_size=32", "train.grad_accum=2"}, 2, 128, 468, 2340), 1000);
  REQUIRE(split.size() == 1);
  CHECK_THAT(split[0], Catch::Contains("over 32 samples instead of 64"));
  // Synchronised BatchNorm normalises over every rank's micro-batch: 4 x 32 = 2 x 64.
  CHECK(dtrain::trainer::resume_changes(
            shape({"data.batch_size=64", "model.sync_batchnorm=true"}, 2, 128, 468, 2340),
            shape({"data.batch_size=32", "model.sync_batchnorm=true"}, 4, 128, 468, 2340), 1000)
            .empty());

  // Four ranks of 64: the global batch doubles, epochs halve, the cosine follows.
  const auto doubled = dtrain::trainer::resume_changes(
      saved, shape({"data.batch_size=64"}, 4, 256, 234, 1170), 1000);
  REQUIRE(doubled.size() == 2);
  CHECK_THAT(doubled[0], Catch::StartsWith("global batch 128 -> 256 (2 -> 4 rank(s)"));
  CHECK_THAT(doubled[0], Catch::Contains("optim.lr is not rescaled"));
  CHECK_THAT(doubled[1], Catch::StartsWith("total steps 2340 -> 1170 (train.max_steps, "
                                           "train.epochs), steps per epoch 468 -> 234: from "
                                           "step 1000 the learning rate follows another"));

  const auto longer = dtrain::trainer::resume_changes(
      saved, shape({"data.batch_size=64", "optim.lr=0.2"}, 2, 128, 468, 4680), 1000);
  REQUIRE(longer.size() == 1);
  CHECK_THAT(longer[0], Catch::StartsWith("optim.lr 0.1 -> 0.2, total steps 2340 -> 4680"));

  // A constant learning rate: a longer run changes no step's rate, only where it ends.
  const std::vector<std::string> constant = {"data.batch_size=64", "schedule.decay=constant"};
  const auto constant_longer = dtrain::trainer::resume_changes(
      shape(constant, 2, 128, 468, 2340), shape(constant, 2, 128, 468, 4680), 1000);
  REQUIRE(constant_longer.size() == 1);
  CHECK_THAT(constant_longer[0], Catch::Contains("the learning rates of the steps left are "
                                                 "unchanged"));
}

TEST_CASE("a run directory in use by another trainer is refused, and free once it ends",
          "[run_dir]") {
  const fs::path run = fresh_dir("in_use");
  std::optional<dtrain::trainer::RunDirLock> first(std::in_place, run.string());
  // flock belongs to an open file: a second open of .lock conflicts, in one process as in two.
  CHECK_THROWS_WITH(dtrain::trainer::RunDirLock(run.string()),
                    run.string() + " is in use by another trainer (pid " +
                        std::to_string(::getpid()) +
                        "); wait for it to end, or choose another run.name");
  first.reset();
  CHECK_NOTHROW(dtrain::trainer::RunDirLock(run.string()));
}
