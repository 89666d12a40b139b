#include "trainer/run_dir.h"

#include "common/error.h"
#include "trainer/checkpoint.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;

namespace dtrain::trainer {

namespace {

// Whether `path` is `dir` or lies below it.
bool inside(const fs::path& path, const fs::path& dir) {
  const fs::path a = fs::weakly_canonical(path);
  const fs::path b = fs::weakly_canonical(dir);
  auto mismatch = std::mismatch(b.begin(), b.end(), a.begin(), a.end());
  return mismatch.first == b.end();
}

ResumeFrom run_checkpoints(const fs::path& run_dir) {
  const std::string dir = (run_dir / "checkpoints").string();
  return {Checkpointer(dir, 0).complete(), true, dir};
}

}  // namespace

std::string run_dir_of(const Config& config) {
  return (fs::path(config.run.out_dir) / config.run.name).string();
}

bool holds_run(const std::string& dir) {
  for (const char* name : {"config.toml", "metrics.jsonl", "metrics.csv", "train.log", "checkpoints"}) {
    if (fs::exists(fs::path(dir) / name)) return true;
  }
  return false;
}

void check_run_dir(const std::string& run_dir, const std::optional<std::string>& resume) {
  if (!holds_run(run_dir)) return;
  if (!resume) {
    throw UserError(fmt::format("{} already holds a run; pass --resume to continue it or choose "
                                "another run.name",
                                run_dir));
  }
  if (!resume->empty() && !inside(*resume, run_dir)) {
    throw UserError(fmt::format("{} already holds a run, and --resume {} continues another "
                                "one; choose another run.name to branch from it there",
                                run_dir, *resume));
  }
}

void create_run_dir(const std::string& run_dir) {
  std::error_code error;
  fs::create_directories(run_dir, error);
  if (error || !fs::is_directory(run_dir)) {
    throw UserError(fmt::format("run.out_dir: cannot create the run's directory {}: {}", run_dir,
                                error ? error.message() : "a file of that name is there"));
  }
}

RunDirLock::RunDirLock(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw UserError(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    const ssize_t got = ::pread(fd_, holder, sizeof(holder) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    const std::string pid = got > 0 ? std::string(holder, static_cast<size_t>(got)) : "";
    throw UserError(fmt::format(
        "{} is in use by another trainer{}; wait for it to end, or choose another run.name",
        run_dir, pid.find_first_not_of("0123456789") == std::string::npos && !pid.empty()
                     ? fmt::format(" (pid {})", pid)
                     : ""));
  }
  if (::ftruncate(fd_, 0) == 0) {
    // The holder's pid, for a refused trainer's message; the lock holds without it.
    const std::string pid = std::to_string(::getpid());
    [[maybe_unused]] const ssize_t wrote = ::pwrite(fd_, pid.data(), pid.size(), 0);
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // lets go of the lock
}

void remove_unstarted_run(const std::string& run_dir, int rank) {
  std::vector<std::string> names = {fmt::format("train.rank{}.log", rank)};
  if (rank == 0) names = {"config.toml", "metrics.jsonl", "metrics.csv", "train.log", ".lock"};
  std::error_code ignored;
  for (const std::string& name : names) fs::remove(fs::path(run_dir) / name, ignored);
  fs::remove(run_dir, ignored);  // only if empty: another rank's log may still be there
}

ResumeFrom resume_from(const std::string& run_dir, const std::string& path) {
  if (path.empty()) return run_checkpoints(run_dir);
  if (!fs::exists(path)) {
    throw UserError(fmt::format("--resume {}: no such file or directory", path));
  }
  if (fs::exists(fs::path(path) / "DONE")) return {{path}, false, ""};
  // A run's checkpoints/ folder: its run.
  const fs::path folder =
      fs::path(path).has_filename() ? fs::path(path) : fs::path(path).parent_path();
  if (folder.filename() == "checkpoints" && fs::is_directory(folder)) {
    return run_checkpoints(folder.parent_path());
  }
  // A checkpoint's own files without its DONE: one whose writing never finished. Its
  // config.toml would otherwise pass it for a run directory without checkpoints, which
  // starts from step 0.
  if (fs::exists(fs::path(path) / "state.toml") || fs::exists(fs::path(path) / "model.pt")) {
    throw UserError(fmt::format("--resume {}: an incomplete checkpoint (no DONE: its writing did "
                                "not finish); pass an older checkpoint, or the run directory to "
                                "continue from its newest complete one",
                                path));
  }
  if (fs::is_directory(fs::path(path) / "checkpoints") || holds_run(path)) {
    return run_checkpoints(path);
  }
  throw UserError(fmt::format("--resume {}: neither a complete checkpoint (no DONE) nor a run "
                              "directory (no checkpoints/); pass a checkpoints/step_N directory "
                              "or a run directory",
                              path));
}

}  // namespace dtrain::trainer
