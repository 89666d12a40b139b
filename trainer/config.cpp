#include "trainer/config.h"

#include "common/did_you_mean.h"
#include "common/log.h"
#include "trainer/config_schema.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

namespace dtrain::trainer {

ConfigError::ConfigError(std::vector<std::string> problems)
    : std::runtime_error(problems.empty() ? "config error" : problems.front()),
      problems_(std::move(problems)) {}

namespace {

// Collects problems with the file/line each key came from.
class Problems {
 public:
  explicit Problems(std::string file) : file_(std::move(file)) {}

  void add(const std::string& key, const toml::source_region& source, const std::string& what) {
    if (source.path && *source.path == "--set") {
      problems_.push_back(fmt::format("--set {}: {}", key, what));
    } else if (source.begin.line > 0) {
      problems_.push_back(fmt::format("{}:{}: {}: {}", file_, source.begin.line, key, what));
    } else {
      problems_.push_back(fmt::format("{}: {}: {}", file_, key, what));
    }
  }
  void add(const std::string& line) { problems_.push_back(line); }
  bool empty() const { return problems_.empty(); }
  std::vector<std::string> take() { return std::move(problems_); }

 private:
  std::string file_;
  std::vector<std::string> problems_;
};

toml::table read_file(const std::string& path) {
  if (path.empty()) return {};
  if (!std::filesystem::is_regular_file(path)) {
    throw ConfigError({fmt::format("{}: config file not found", path)});
  }
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw ConfigError({fmt::format("{}:{}:{}: TOML syntax error: {}", path,
                                   e.source().begin.line, e.source().begin.column,
                                   e.description())});
  }
}

// "section.key=value": the value is TOML (1e-3, true, [1, 2], "text"), or a bare word.
void apply_override(toml::table& root, const std::string& assignment, Problems& problems) {
  const size_t equals = assignment.find('=');
  const std::string key = assignment.substr(0, equals);
  const size_t dot = key.find('.');
  if (equals == std::string::npos || dot == std::string::npos || dot == 0 ||
      key.back() == '.' || key.find("..") != std::string::npos) {
    problems.add(fmt::format("--set {}: expected section.key=value", assignment));
    return;
  }
  const std::string value = assignment.substr(equals + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value, std::string_view("--set"));
  } catch (const toml::parse_error&) {
    std::string quoted;
    for (char c : value) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    parsed = toml::parse("v = \"" + quoted + "\"", std::string_view("--set"));
  }
  // Walk (creating) the tables of "a.b.c", then set the last component.
  toml::table* table = &root;
  size_t begin = 0;
  for (size_t next = key.find('.'); next != std::string::npos; next = key.find('.', begin)) {
    const std::string part = key.substr(begin, next - begin);
    if (!table->contains(part)) table->insert(part, toml::table{});
    table = (*table)[part].as_table();
    if (table == nullptr) {
      problems.add(fmt::format("--set {}: [{}] is not a table", key, key.substr(0, next)));
      return;
    }
    begin = next + 1;
  }
  table->insert_or_assign(key.substr(begin), std::move(*parsed.get("v")));
  // Nodes moved out of `parsed` keep its source, so errors on them read "--set key: ...".
}

void report_field_errors(const FieldErrors& errors, const std::string& section,
                         const toml::table& root, Problems& problems) {
  for (const FieldError& error : errors) {
    const std::string key = section + "." + error.key;
    const toml::node* node = root.at_path(key).node();
    problems.add(key, node ? node->source() : toml::source_region{}, error.problem);
  }
}

void check_cross_fields(const Config& config, const toml::table& root, Problems& problems) {
  if (config.train.precision != "fp32" && config.run.device == "cpu") {
    const toml::node* node = root.at_path("train.precision").node();
    problems.add("train.precision", node ? node->source() : toml::source_region{},
                 fmt::format("\"{}\" autocast needs CUDA, but run.device = \"cpu\"; use "
                             "\"fp32\" on CPU",
                             config.train.precision));
  }
  if (config.dist.strategy == "zero" && config.train.precision == "fp16") {
    const toml::node* node = root.at_path("train.precision").node();
    problems.add("train.precision", node ? node->source() : toml::source_region{},
                 "fp16 loss scaling is not available with dist.strategy = \"zero\" (each rank "
                 "sees only its own gradients); use \"bf16\"");
  }
  if (config.model.name == "simple_cnn" && config.model.zero_init_residual) {
    log::warn("model.zero_init_residual has no effect on simple_cnn (it has no residual blocks)");
  }
  if (config.optim.name == "adamw" && config.optim.nesterov) {
    log::warn("optim.nesterov has no effect with adamw");
  }
}

// Stores every key of `table` (the section at `prefix`), descending into subsections.
void read_table(const toml::table& table, const std::string& prefix,
                const std::map<std::string, const ConfigKey*>& by_path,
                const std::set<std::string>& sections,
                const std::vector<std::string>& known_paths, Problems& problems) {
  for (auto&& [name_key, node] : table) {
    const std::string full = prefix + "." + std::string(name_key.str());
    auto found = by_path.find(full);
    if (found != by_path.end()) {
      const std::string problem = found->second->set(node);
      if (!problem.empty()) problems.add(full, node.source(), problem);
    } else if (node.is_table() && sections.count(full) > 0) {
      read_table(*node.as_table(), full, by_path, sections, known_paths, problems);
    } else {
      problems.add(full, node.source(), "unknown key" + did_you_mean(full, known_paths));
    }
  }
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  toml::table root = read_file(path);
  Problems problems(path.empty() ? "<defaults>" : path);
  for (const std::string& assignment : overrides) apply_override(root, assignment, problems);

  Config config;
  std::vector<ConfigKey> keys = config_keys(config);
  std::map<std::string, const ConfigKey*> by_path;
  std::vector<std::string> known_paths;
  std::set<std::string> sections;  // "dist" and "dist.ddp" for the key "dist.ddp.overlap"
  for (const ConfigKey& key : keys) {
    by_path[key.path] = &key;
    known_paths.push_back(key.path);
    for (size_t dot = key.path.find('.'); dot != std::string::npos;
         dot = key.path.find('.', dot + 1)) {
      sections.insert(key.path.substr(0, dot));
    }
  }
  std::vector<std::string> known_sections;
  for (const std::string& section : sections) {
    if (section.find('.') == std::string::npos) known_sections.push_back(section);
  }

  for (auto&& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const toml::table* table = section_node.as_table();
    if (table == nullptr || sections.count(section) == 0) {
      const std::string hint = did_you_mean(section, table ? known_sections : known_paths);
      problems.add(section, section_key.source(),
                   table ? "unknown section" + hint : "keys belong in a [section]" + hint);
      continue;
    }
    read_table(*table, section, by_path, sections, known_paths, problems);
  }
  if (!problems.empty()) throw ConfigError(problems.take());

  report_field_errors(config.run.validate(), "run", root, problems);
  report_field_errors(config.train.validate(), "train", root, problems);
  report_field_errors(config.model.validate(), "model", root, problems);
  report_field_errors(config.data.validate(), "data", root, problems);
  report_field_errors(config.optim.validate(), "optim", root, problems);
  report_field_errors(config.schedule.validate(), "schedule", root, problems);
  report_field_errors(config.dist.validate(), "dist", root, problems);
  check_cross_fields(config, root, problems);
  if (!problems.empty()) throw ConfigError(problems.take());
  return config;
}

std::string to_toml(const Config& config) {
  Config copy = config;
  toml::table root;
  for (const ConfigKey& key : config_keys(copy)) {
    toml::table* table = &root;
    size_t begin = 0;
    for (size_t dot = key.path.find('.'); dot != std::string::npos;
         dot = key.path.find('.', begin)) {
      const std::string part = key.path.substr(begin, dot - begin);
      if (!table->contains(part)) table->insert(part, toml::table{});
      table = (*table)[part].as_table();
      begin = dot + 1;
    }
    key.put(*table, key.path.substr(begin));
  }
  std::ostringstream out;
  out << root << '\n';
  return out.str();
}

std::string describe_keys(bool markdown) {
  Config defaults;
  std::ostringstream out;
  std::string section;
  if (markdown) out << "| key | type | default | description |\n|---|---|---|---|\n";
  for (const ConfigKey& key : config_keys(defaults)) {
    toml::table holder;
    key.put(holder, "v");
    std::ostringstream value;
    holder.get("v")->visit([&value](const auto& node) { value << node; });
    const size_t dot = key.path.rfind('.');
    if (markdown) {
      out << fmt::format("| `{}` | {} | `{}` | {} |\n", key.path, key.type, value.str(),
                         key.help);
      continue;
    }
    if (key.path.substr(0, dot) != section) {
      section = key.path.substr(0, dot);
      out << (out.tellp() > 0 ? "\n" : "") << "[" << section << "]\n";
    }
    out << fmt::format("{} = {}  # {}\n", key.path.substr(dot + 1), value.str(), key.help);
  }
  return out.str();
}

}  // namespace dtrain::trainer
