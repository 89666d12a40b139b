#include "trainer/checkpoint.h"

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "models/export.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

namespace fs = std::filesystem;

namespace dtrain::trainer {

namespace {

constexpr const char* kPrefix = "step_";

std::vector<fs::path> complete_checkpoints(const std::string& dir) {
  std::vector<fs::path> found;
  if (!fs::is_directory(dir)) return found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind(kPrefix, 0) == 0 &&
        name.find('.') == std::string::npos && fs::exists(entry.path() / "DONE")) {
      found.push_back(entry.path());
    }
  }
  std::sort(found.begin(), found.end());  // zero-padded step numbers sort in step order
  return found;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw UserError(fmt::format("{}: cannot write", path.string()));
}

}  // namespace

Checkpointer::Checkpointer(std::string dir, int64_t keep) : dir_(std::move(dir)), keep_(keep) {}

void Checkpointer::save(const CheckpointInfo& info, const dist::NamedTensors& model_state,
                        dist::Strategy& strategy, const std::string& config_toml) const {
  const fs::path final_path = fs::path(dir_) / fmt::format("{}{:08d}", kPrefix, info.step);
  const fs::path temp_path = final_path.string() + ".tmp";
  remove_tree(temp_path);
  fs::create_directories(temp_path);

  models::save_state_dict(model_state, (temp_path / "model.pt").string());
  strategy.save(temp_path.string());
  toml::table state{{"step", info.step}, {"epoch", info.epoch}, {"strategy", strategy.name()}};
  std::ostringstream state_text;
  state_text << state << '\n';
  write_file(temp_path / "state.toml", state_text.str());
  write_file(temp_path / "config.toml", config_toml);
  write_file(temp_path / "DONE", "");

  // rename() of a directory is atomic: readers see the old checkpoint set or the new one.
  remove_tree(final_path);
  fs::rename(temp_path, final_path);
  prune();
}

void Checkpointer::prune() const {
  std::vector<fs::path> complete = complete_checkpoints(dir_);
  const int64_t excess = static_cast<int64_t>(complete.size()) - keep_;
  for (int64_t i = 0; i < excess; ++i) remove_tree(complete[i]);
}

std::optional<std::string> Checkpointer::latest() const {
  std::vector<fs::path> complete = complete_checkpoints(dir_);
  if (complete.empty()) return std::nullopt;
  return complete.back().string();
}

CheckpointInfo Checkpointer::load(const std::string& path, dist::Strategy& strategy) {
  const fs::path dir(path);
  if (!fs::exists(dir / "DONE")) {
    throw UserError(fmt::format("{}: not a complete checkpoint (no DONE marker)", path));
  }
  toml::table state;
  try {
    state = toml::parse_file((dir / "state.toml").string());
  } catch (const toml::parse_error& e) {
    throw UserError(fmt::format("{}/state.toml: unreadable: {}", path, e.description()));
  }
  // Every strategy reads every strategy's optimizer state (dist/optimizer_state.h).
  const std::string saved_strategy = state["strategy"].value_or(std::string());
  if (saved_strategy != strategy.name()) {
    log::info("{}: written by strategy \"{}\", resumed under \"{}\"", path, saved_strategy,
              strategy.name());
  }
  // Read into the consolidated state (checked against its names and shapes), then handed
  // back: a sharding strategy keeps its part.
  const dist::NamedTensors model_state = strategy.model_state();
  models::load_state_dict(model_state, (dir / "model.pt").string());
  strategy.load_model_state(model_state);
  strategy.load(path);
  return {state["step"].value_or(int64_t{0}), state["epoch"].value_or(int64_t{0})};
}

}  // namespace dtrain::trainer
