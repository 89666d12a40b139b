#include "common/error.h"
#include "common/files.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"
#include "trainer/train.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <unistd.h>

namespace fs = std::filesystem;
using dtrain::UserError;
using dtrain::trainer::RunFlags;
using dtrain::trainer::RunResult;
using dtrain::trainer::run_training;

namespace {

// Per process: test runs of other checkouts on this machine use the same temp directory.
const fs::path kRoot =
    fs::temp_directory_path() / ("dtrain_resume_test." + std::to_string(getpid()));
struct RemoveAtExit {
  ~RemoveAtExit() { dtrain::remove_tree(kRoot); }
} remove_at_exit;

bool have_fashion_mnist() {
  if (fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) return true;
  WARN("Fashion-MNIST is not installed (package dataset-fashion-mnist); skipping");
  return false;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

dtrain::trainer::Config small_run(const fs::path& out_dir, const std::string& workers = "0",
                                  const std::string& name = "resume") {
  return dtrain::trainer::load_config(
      "", {"run.out_dir=" + out_dir.string(), "run.name=" + name, "run.device=cpu",
           "run.num_threads=1", "run.log_every=3", "train.max_steps=12",
           "train.checkpoint_every=6", "train.keep_checkpoints=5", "data.batch_size=16",
           "data.num_workers=" + workers, "model.width=8", "schedule.warmup_epochs=0.002"});
}

RunFlags resume_flags(const std::string& path = "") {
  RunFlags flags;
  flags.resume = path;
  return flags;
}

// 12 steps straight through, checkpoints at 6 and 12; run once, copied by the tests.
struct Straight {
  fs::path dir;  // the run directory
  RunResult result;
};
const Straight& straight() {
  static const Straight run = [] {
    dtrain::remove_tree(kRoot);
    const RunResult result = run_training(small_run(kRoot / "straight", "2"), {});
    return Straight{kRoot / "straight" / "resume", result};
  }();
  return run;
}

// A copy of the straight run under out_dir/resume.
fs::path copy_of_straight(const std::string& out_dir) {
  const fs::path run = kRoot / out_dir / "resume";
  dtrain::remove_tree(kRoot / out_dir);
  fs::create_directories(run.parent_path());
  fs::copy(straight().dir, run, fs::copy_options::recursive);
  return run;
}

// (kind, step) of every metrics record.
std::vector<std::pair<std::string, int64_t>> records(const fs::path& run) {
  std::vector<std::pair<std::string, int64_t>> found;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    found.emplace_back(record["kind"].get<std::string>(), record["step"].get<int64_t>());
  }
  return found;
}

const std::vector<std::pair<std::string, int64_t>> kStraightRecords = {
    {"step", 3}, {"step", 6}, {"step", 9}, {"step", 12}, {"eval", 12}, {"final", 12}};

std::string error_of(const dtrain::trainer::Config& config, const RunFlags& flags) {
  try {
    run_training(config, flags);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("resuming from a checkpoint gives bitwise the same weights", "[resume]") {
  if (!have_fashion_mnist()) return;
  const fs::path checkpoints = straight().dir / "checkpoints";
  REQUIRE(fs::exists(checkpoints / "step_00000006" / "DONE"));
  REQUIRE(fs::exists(checkpoints / "step_00000012" / "DONE"));
  CHECK(records(straight().dir) == kStraightRecords);

  // Interrupted: only the step-6 checkpoint survives; resume it with another worker count.
  const fs::path resumed = kRoot / "resumed" / "resume" / "checkpoints";
  fs::create_directories(resumed);
  fs::copy(checkpoints / "step_00000006", resumed / "step_00000006");
  run_training(small_run(kRoot / "resumed"), resume_flags());
  REQUIRE(fs::exists(resumed / "step_00000012" / "DONE"));

  // The weights after six more steps depend on the restored momentum buffers and BatchNorm
  // statistics too. (optimizer.pt bytes differ: LibTorch keys its state by tensor address.)
  CHECK(read_bytes(checkpoints / "step_00000012" / "model.pt") ==
        read_bytes(resumed / "step_00000012" / "model.pt"));
}

TEST_CASE("the last step is checkpointed when checkpoint_every does not divide it",
          "[resume]") {
  if (!have_fashion_mnist()) return;
  dtrain::trainer::Config config = small_run(kRoot / "last");
  config.train.max_steps = 8;
  const RunResult result = run_training(config, {});
  CHECK(result.steps == 8);
  const fs::path checkpoints = kRoot / "last" / "resume" / "checkpoints";
  CHECK(fs::exists(checkpoints / "step_00000006" / "DONE"));
  CHECK(fs::exists(checkpoints / "step_00000008" / "DONE"));
}

TEST_CASE("a resumed run replaces the metrics records after its checkpoint", "[resume]") {
  if (!have_fashion_mnist()) return;
  // The run got to step 12 and wrote its records, but only the step-6 checkpoint survived.
  const fs::path run = copy_of_straight("metrics");
  dtrain::remove_tree(run / "checkpoints" / "step_00000012");
  const RunResult result = run_training(small_run(kRoot / "metrics"), resume_flags());
  CHECK(result.steps == 12);
  CHECK(records(run) == kStraightRecords);  // steps 9 and 12 once each, one final record
}

TEST_CASE("a run directory that holds a run is not written without --resume", "[resume]") {
  if (!have_fashion_mnist()) return;
  const fs::path run = copy_of_straight("taken");
  const std::string metrics = read_bytes(run / "metrics.jsonl");
  const std::string error = error_of(small_run(kRoot / "taken"), {});
  CHECK(error == run.string() +
                     " already holds a run; pass --resume to continue it or choose another "
                     "run.name");
  CHECK(read_bytes(run / "metrics.jsonl") == metrics);
  // Nor by a branch from another run's checkpoint.
  const std::string branch = error_of(
      small_run(kRoot / "taken"),
      resume_flags((straight().dir / "checkpoints" / "step_00000006").string()));
  CHECK_THAT(branch, Catch::Contains("already holds a run, and --resume"));
  CHECK(read_bytes(run / "metrics.jsonl") == metrics);
}

TEST_CASE("a damaged checkpoint: its file named in one line, or the next older one loads",
          "[resume]") {
  if (!have_fashion_mnist()) return;
  const fs::path run = copy_of_straight("damaged");
  const fs::path newest = run / "checkpoints" / "step_00000012";
  fs::resize_file(newest / "optimizer.pt", 100);

  // Named explicitly, it is an error naming the file, in one line.
  const std::string error = error_of(small_run(kRoot / "damaged"), resume_flags(newest.string()));
  CHECK_THAT(error, Catch::StartsWith((newest / "optimizer.pt").string() + ": damaged"));
  CHECK(error.find('\n') == std::string::npos);

  // A leftover of an interrupted write, which the resumed run removes.
  fs::create_directories(run / "checkpoints" / "step_00000014.tmp");

  // Bare --resume falls back to step 6 and trains steps 7-12 again, bitwise as before.
  const RunResult result = run_training(small_run(kRoot / "damaged"), resume_flags());
  CHECK(result.steps == 12);
  CHECK(read_bytes(newest / "model.pt") ==
        read_bytes(straight().dir / "checkpoints" / "step_00000012" / "model.pt"));
  CHECK(records(run) == kStraightRecords);
  CHECK_FALSE(fs::exists(run / "checkpoints" / "step_00000014.tmp"));
  // The damaged one is set aside, out of --resume's and keep_checkpoints' sight.
  CHECK(fs::file_size(run / "checkpoints" / "step_00000012.unloadable" / "optimizer.pt") == 100);
}

TEST_CASE("each damaged checkpoint file is named", "[resume]") {
  if (!have_fashion_mnist()) return;
  for (const std::string file : {"model.pt", "state.toml"}) {
    const fs::path run = copy_of_straight("damaged_" + file);
    const fs::path checkpoint = run / "checkpoints" / "step_00000006";
    std::ofstream(checkpoint / file) << "step = [";
    const std::string error = error_of(small_run(kRoot / ("damaged_" + file)),
                                       resume_flags(checkpoint.string()));
    CHECK_THAT(error, Catch::Contains((checkpoint / file).string()));
    CHECK(error.find('\n') == std::string::npos);
  }
}

TEST_CASE("resuming a finished run trains nothing and reports its stored result", "[resume]") {
  if (!have_fashion_mnist()) return;
  const fs::path run = copy_of_straight("finished");
  const RunResult result = run_training(small_run(kRoot / "finished"), resume_flags());
  CHECK(result.steps == 12);
  CHECK(result.stop_signal == 0);
  CHECK(result.test_accuracy == straight().result.test_accuracy);
  CHECK(result.test_loss == straight().result.test_loss);
  CHECK(records(run) == kStraightRecords);
  // Its training time is the checkpoint's: this session trained nothing.
  const auto info = dtrain::trainer::Checkpointer::read_info(
      (run / "checkpoints" / "step_00000012").string());
  CHECK(result.train_seconds == info.train_seconds);
}

TEST_CASE("--resume takes a run directory and continues its newest checkpoint", "[resume]") {
  if (!have_fashion_mnist()) return;
  const fs::path run = copy_of_straight("by_dir");
  dtrain::remove_tree(run / "checkpoints" / "step_00000012");
  const RunResult result = run_training(small_run(kRoot / "by_dir"), resume_flags(run.string()));
  CHECK(result.steps == 12);
  CHECK(read_bytes(run / "checkpoints" / "step_00000012" / "model.pt") ==
        read_bytes(straight().dir / "checkpoints" / "step_00000012" / "model.pt"));

  // Another run's directory: a branch into this run's own, empty directory.
  const RunResult branch = run_training(small_run(kRoot / "by_dir", "0", "branch"),
                                        resume_flags(straight().dir.string()));
  CHECK(branch.steps == 12);
  CHECK(branch.test_accuracy == straight().result.test_accuracy);
  CHECK(fs::exists(kRoot / "by_dir" / "branch" / "metrics.jsonl"));

  CHECK(error_of(small_run(kRoot / "by_dir", "0", "other"), resume_flags("/nonexistent")) ==
        "--resume /nonexistent: no such file or directory");
}

TEST_CASE("a checkpoint of another optimizer is refused in one line", "[resume]") {
  if (!have_fashion_mnist()) return;
  const fs::path run = copy_of_straight("other_optimizer");
  dtrain::trainer::Config config = small_run(kRoot / "other_optimizer");
  config.optim.name = "adamw";
  config.train.max_steps = 18;
  CHECK(error_of(config, resume_flags()) ==
        (run / "checkpoints" / "step_00000012").string() +
            ": holds the optimizer state of optim.name = \"sgd\", which optim.name = \"adamw\" "
            "cannot continue; resume with optim.name = \"sgd\"");
}

// loss/train of every step record.
std::map<int64_t, double> logged_losses(const fs::path& run) {
  std::map<int64_t, double> losses;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record["kind"] == "step") losses[record["step"]] = record["loss/train"];
  }
  return losses;
}

TEST_CASE("a run resumed inside a logging interval logs its loss as the straight run did",
          "[resume]") {
  if (!have_fashion_mnist()) return;
  // Logged at 4, 8, 12; checkpointed at 6, inside the second interval.
  dtrain::trainer::Config config = small_run(kRoot / "interval_straight");
  config.run.log_every = 4;
  run_training(config, {});
  const fs::path straight_run = kRoot / "interval_straight" / "resume";
  const fs::path run = kRoot / "interval_resumed" / "resume";
  fs::create_directories(run / "checkpoints");
  fs::copy(straight_run / "checkpoints" / "step_00000006", run / "checkpoints" / "step_00000006",
           fs::copy_options::recursive);
  // A checkpoint without its DONE: set aside, not replaced unannounced.
  fs::create_directories(run / "checkpoints" / "step_00000009");
  config.run.out_dir = (kRoot / "interval_resumed").string();
  run_training(config, resume_flags());
  CHECK(fs::exists(run / "checkpoints" / "step_00000009.unloadable"));

  const auto straight_losses = logged_losses(straight_run);
  const auto resumed_losses = logged_losses(run);
  REQUIRE(resumed_losses.size() == 2);  // steps 8 and 12
  for (const auto& [step, loss] : resumed_losses) {
    INFO("step " << step);
    CHECK(loss == Approx(straight_losses.at(step)).epsilon(1e-6));
  }
}

TEST_CASE("an interrupted checkpoint write leaves the last complete one in place", "[resume]") {
  const fs::path dir = fs::temp_directory_path() / "dtrain_partial_checkpoint";
  dtrain::remove_tree(dir);
  fs::create_directories(dir / "step_00000004");
  std::ofstream(dir / "step_00000004" / "DONE");
  // A crash mid-write leaves a .tmp directory without DONE; it must never be chosen.
  fs::create_directories(dir / "step_00000008.tmp");
  std::ofstream(dir / "step_00000008.tmp" / "model.pt") << "partial";
  const dtrain::trainer::Checkpointer checkpointer(dir.string(), 2);
  const auto latest = checkpointer.latest();
  REQUIRE(latest);
  CHECK(fs::path(*latest).filename() == "step_00000004");
  CHECK(checkpointer.complete() == std::vector<std::string>{*latest});
  checkpointer.remove_partial();
  CHECK_FALSE(fs::exists(dir / "step_00000008.tmp"));
  CHECK(fs::exists(dir / "step_00000004" / "DONE"));
  dtrain::remove_tree(dir);
}
