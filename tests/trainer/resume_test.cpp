#include "common/files.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"
#include "trainer/train.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

dtrain::trainer::Config small_run(const fs::path& out_dir, const std::string& workers) {
  return dtrain::trainer::load_config(
      "", {"run.out_dir=" + out_dir.string(), "run.name=resume", "run.device=cpu",
           "run.num_threads=1", "train.max_steps=12", "train.checkpoint_every=6",
           "train.keep_checkpoints=5", "data.batch_size=16", "data.num_workers=" + workers,
           "model.width=8", "schedule.warmup_epochs=0.002"});
}

}  // namespace

TEST_CASE("resuming from a checkpoint gives bitwise the same weights", "[resume]") {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST is not installed (package dataset-fashion-mnist); skipping");
    return;
  }
  const fs::path root = fs::temp_directory_path() / "dtrain_resume_test";
  dtrain::remove_tree(root);

  // Straight through: 12 steps, checkpoints at 6 and 12.
  dtrain::trainer::run_training(small_run(root / "straight", "2"), {});
  const fs::path straight = root / "straight" / "resume" / "checkpoints";
  REQUIRE(fs::exists(straight / "step_00000006" / "DONE"));
  REQUIRE(fs::exists(straight / "step_00000012" / "DONE"));

  // Interrupted: only the step-6 checkpoint survives; resume it with another worker count.
  const fs::path resumed = root / "resumed" / "resume" / "checkpoints";
  fs::create_directories(resumed);
  fs::copy(straight / "step_00000006", resumed / "step_00000006");
  dtrain::trainer::RunFlags flags;
  flags.resume = "";
  dtrain::trainer::run_training(small_run(root / "resumed", "0"), flags);
  REQUIRE(fs::exists(resumed / "step_00000012" / "DONE"));

  // The weights after six more steps depend on the restored momentum buffers and BatchNorm
  // statistics too. (optimizer.pt bytes differ: LibTorch keys its state by tensor address.)
  CHECK(read_bytes(straight / "step_00000012" / "model.pt") ==
        read_bytes(resumed / "step_00000012" / "model.pt"));
  dtrain::remove_tree(root);
}

TEST_CASE("an interrupted checkpoint write leaves the last complete one in place", "[resume]") {
  const fs::path dir = fs::temp_directory_path() / "dtrain_partial_checkpoint";
  dtrain::remove_tree(dir);
  fs::create_directories(dir / "step_00000004");
  std::ofstream(dir / "step_00000004" / "DONE");
  // A crash mid-write leaves a .tmp directory without DONE; it must never be chosen.
  fs::create_directories(dir / "step_00000008.tmp");
  std::ofstream(dir / "step_00000008.tmp" / "model.pt") << "partial";
  const auto latest = dtrain::trainer::Checkpointer(dir.string(), 2).latest();
  REQUIRE(latest);
  CHECK(fs::path(*latest).filename() == "step_00000004");
  dtrain::remove_tree(dir);
}
