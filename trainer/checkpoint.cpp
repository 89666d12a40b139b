#include "trainer/checkpoint.h"

#include "common/error.h"
#include "common/files.h"
#include "common/host_wait.h"
#include "common/log.h"
#include "models/export.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <sstream>
#include <vector>

namespace fs = std::filesystem;

namespace dtrain::trainer {

namespace {

constexpr const char* kPrefix = "step_";

bool is_step_dir(const fs::directory_entry& entry) {
  return entry.is_directory() && entry.path().filename().string().rfind(kPrefix, 0) == 0;
}

std::vector<fs::path> complete_checkpoints(const std::string& dir) {
  std::vector<fs::path> found;
  if (!fs::is_directory(dir)) return found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (is_step_dir(entry) && entry.path().filename().string().find('.') == std::string::npos &&
        fs::exists(entry.path() / "DONE")) {
      found.push_back(entry.path());
    }
  }
  std::sort(found.begin(), found.end());  // zero-padded step numbers sort in step order
  return found;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// The first of the strategy's files in `dir` (every *.pt but model.pt) that torch cannot read
// as an archive, or "" when each one reads.
std::string unreadable_archive(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const fs::path& file = entry.path();
    if (file.extension() == ".pt" && file.filename() != "model.pt") files.push_back(file);
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(file.string());
    } catch (const c10::Error&) {
      return file.string();
    }
  }
  return "";
}

// Runs this worker's part of a step of the save protocol, then waits for every worker's: throws
// this worker's error if its part failed, or a UserError if another's did.
void run_agreed(const std::function<void()>& part, const std::string& dir, const std::string& what,
                const Checkpointer::AllAgree& all_agree) {
  std::exception_ptr failed;
  try {
    part();
  } catch (const fs::filesystem_error& e) {  // a read-only or full file system
    failed = std::make_exception_ptr(
        UserError(fmt::format("{}: cannot {} it: {}", dir, what, e.code().message())));
  } catch (...) {
    failed = std::current_exception();
  }
  const bool all_done = all_agree(failed == nullptr);
  if (failed) std::rethrow_exception(failed);
  if (!all_done) {
    throw UserError(fmt::format("{}: another rank failed to {} it (its log says why); the "
                                "newest complete checkpoint stays the previous one",
                                dir, what));
  }
}

std::string state_text(const CheckpointInfo& info) {
  toml::table state{{"step", info.step},
                    {"epoch", info.epoch},
                    {"strategy", info.strategy},
                    {"world_size", info.world_size},
                    {"global_batch", info.global_batch},
                    {"steps_per_epoch", info.steps_per_epoch},
                    {"total_steps", info.total_steps},
                    {"train_seconds", info.train_seconds}};
  if (std::isfinite(info.test_accuracy)) state.insert("test_accuracy", info.test_accuracy);
  if (std::isfinite(info.test_loss)) state.insert("test_loss", info.test_loss);
  if (info.interval_first_step < info.step) {
    state.insert("interval_first_step", info.interval_first_step);
    state.insert("interval_loss_sum", info.interval_loss_sum);
    state.insert("interval_skipped", info.interval_skipped);
  }
  std::ostringstream text;
  text << state << '\n';
  return text.str();
}

}  // namespace

bool all_finite(const dist::NamedTensors& state) {
  std::vector<torch::Tensor> finite;
  for (const auto& item : state) {
    if (item.second.is_floating_point()) finite.push_back(torch::isfinite(item.second).all());
  }
  // The state's first read from the device (polled: common/host_wait.h); later ones find the
  // stream drained.
  return finite.empty() || to_host(torch::stack(finite).all()).item<bool>();
}

Checkpointer::Checkpointer(std::string dir, int64_t keep) : dir_(std::move(dir)), keep_(keep) {}

void Checkpointer::check_writable() const {
  const fs::path dir = fs::is_directory(dir_) ? fs::path(dir_) : fs::path(dir_).parent_path();
  const fs::path probe = dir / ".write_check";
  std::error_code error;
  fs::create_directory(probe, error);
  if (error) {
    throw UserError(fmt::format("{}: checkpoints cannot be written there: {}", dir.string(),
                                error.message()));
  }
  fs::remove(probe, error);
}

void Checkpointer::save(const CheckpointInfo& info, const dist::NamedTensors& model_state,
                        dist::Strategy& strategy, const std::string& config_toml, int rank,
                        const AllAgree& all_agree) const {
  const fs::path final_path = fs::path(dir_) / fmt::format("{}{:08d}", kPrefix, info.step);
  const fs::path temp_path = final_path.string() + ".tmp";
  run_agreed(
      [&] {
        if (rank != 0) return;
        remove_tree(temp_path);
        fs::create_directories(temp_path);
      },
      temp_path.string(), "create", all_agree);
  run_agreed([&] { strategy.save_partition(temp_path.string()); }, temp_path.string(),
             "write its part into", all_agree);
  if (rank != 0) return;

  try {
    models::save_state_dict(model_state, (temp_path / "model.pt").string());
    strategy.save(temp_path.string());
    write_whole_file(temp_path / "state.toml", state_text(info));
    write_whole_file(temp_path / "config.toml", config_toml);
    write_whole_file(temp_path / "DONE", "");
  } catch (...) {
    remove_tree(temp_path);  // a full disk: give the space back, keep the previous checkpoints
    throw;
  }

  // rename() of a directory is atomic: readers see the old checkpoint set or the new one.
  remove_tree(final_path);
  fs::rename(temp_path, final_path);
  prune();
}

void Checkpointer::prune() const {
  std::vector<fs::path> complete = complete_checkpoints(dir_);
  const int64_t excess = static_cast<int64_t>(complete.size()) - keep_;
  for (int64_t i = 0; i < excess; ++i) remove_tree(complete[i]);
  remove_partial();
}

void Checkpointer::remove_partial() const {
  if (!fs::is_directory(dir_)) return;
  std::vector<fs::path> partial;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (is_step_dir(entry) && entry.path().extension() == ".tmp") partial.push_back(entry.path());
  }
  for (const fs::path& path : partial) {
    log::info("removing {}, left by an interrupted checkpoint write", path.string());
    remove_tree(path);
  }
}

void Checkpointer::set_aside_incomplete() const {
  if (!fs::is_directory(dir_)) return;
  std::vector<fs::path> incomplete;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (is_step_dir(entry) && name.find('.') == std::string::npos &&
        !fs::exists(entry.path() / "DONE")) {
      incomplete.push_back(entry.path());
    }
  }
  for (const fs::path& path : incomplete) {
    const std::string aside = path.string() + ".unloadable";
    std::error_code error;
    remove_tree(aside);
    fs::rename(path, aside, error);
    log::warn("{}: not a complete checkpoint (no DONE: copied in part, or its marker removed), "
              "so --resume passes it over; {}",
              path.string(), error ? "it cannot be set aside: " + error.message()
                                   : "set aside as " + aside);
  }
}

void Checkpointer::set_aside(const std::string& path) const {
  std::error_code error;
  if (!fs::equivalent(fs::path(path).parent_path(), dir_, error)) return;  // another run's
  const std::string aside = path + ".unloadable";
  remove_tree(aside);
  fs::rename(path, aside, error);
  if (error) {
    log::warn("{}: does not load, and cannot be set aside: {}", path, error.message());
  } else {
    log::info("set {} aside as {}: it does not load", path, aside);
  }
}

std::vector<std::string> Checkpointer::complete() const {
  std::vector<std::string> newest_first;
  for (const fs::path& path : complete_checkpoints(dir_)) newest_first.push_back(path.string());
  std::reverse(newest_first.begin(), newest_first.end());
  return newest_first;
}

std::optional<std::string> Checkpointer::latest() const {
  std::vector<std::string> all = complete();
  if (all.empty()) return std::nullopt;
  return all.front();
}

CheckpointInfo Checkpointer::read_info(const std::string& path) {
  const std::string file = (fs::path(path) / "state.toml").string();
  toml::table state;
  try {
    state = toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    throw UserError(fmt::format("{}: unreadable: {}", file, e.description()));
  }
  if (!state["step"].is_integer()) throw UserError(fmt::format("{}: no step", file));
  CheckpointInfo info;
  info.step = state["step"].value_or(int64_t{0});
  info.epoch = state["epoch"].value_or(int64_t{0});
  info.strategy = state["strategy"].value_or(std::string());
  info.world_size = state["world_size"].value_or(int64_t{0});
  info.global_batch = state["global_batch"].value_or(int64_t{0});
  info.steps_per_epoch = state["steps_per_epoch"].value_or(int64_t{0});
  info.total_steps = state["total_steps"].value_or(int64_t{0});
  info.train_seconds = state["train_seconds"].value_or(0.0);
  info.test_accuracy = state["test_accuracy"].value_or(info.test_accuracy);
  info.test_loss = state["test_loss"].value_or(info.test_loss);
  info.interval_first_step = state["interval_first_step"].value_or(info.step);
  info.interval_loss_sum = state["interval_loss_sum"].value_or(0.0);
  info.interval_skipped = state["interval_skipped"].value_or(int64_t{0});
  if (info.interval_first_step < 0 || info.interval_first_step > info.step ||
      info.interval_skipped < 0 || info.interval_skipped > info.step - info.interval_first_step) {
    throw UserError(fmt::format("{}: interval_first_step or interval_skipped out of range", file));
  }
  return info;
}

CheckpointInfo Checkpointer::load(const std::string& path, dist::Strategy& strategy) {
  const fs::path dir(path);
  if (!fs::exists(dir / "DONE")) {
    throw UserError(fmt::format("{}: not a complete checkpoint (no DONE marker)", path));
  }
  const CheckpointInfo info = read_info(path);
  // Every strategy reads every strategy's optimizer state (dist/optimizer_state.h).
  // Read into the consolidated state (checked against its names and shapes), then handed
  // back: a sharding strategy keeps its part.
  const dist::NamedTensors model_state = strategy.model_state();
  const std::string model_file = (dir / "model.pt").string();
  try {
    models::load_state_dict(model_state, model_file);
  } catch (const c10::Error& e) {
    throw UserError(fmt::format("{}: does not load: {}", model_file,
                                first_line(e.what_without_backtrace())));
  }
  strategy.load_model_state(model_state);
  try {
    strategy.load(path);
  } catch (const c10::Error& e) {
    // The strategy's files are its own; name the one torch cannot read, if one is.
    const std::string file = unreadable_archive(dir);
    throw UserError(fmt::format("{}: damaged, does not load: {}", file.empty() ? path : file,
                                first_line(e.what_without_backtrace())));
  }
  return info;
}

}  // namespace dtrain::trainer
