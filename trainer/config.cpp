#include "trainer/config.h"

#include "common/did_you_mean.h"
#include "common/log.h"
#include "trainer/toml_binding.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace dtrain::trainer {

ConfigError::ConfigError(std::vector<std::string> problems)
    : std::runtime_error(problems.empty() ? "config error" : problems.front()),
      problems_(std::move(problems)) {}

namespace {

// Collects problems (or warnings) with the place each key came from, and hands them back in
// file order, then those from --set, then those of keys set nowhere.
class Problems {
 public:
  explicit Problems(std::string file) : file_(std::move(file)) {}

  void add(const std::string& key, const toml::source_region& source, const std::string& what) {
    if (source.path && *source.path == "--set") {
      add(kFromSet, 0, fmt::format("--set {}: {}", key, what));
    } else if (source.begin.line > 0) {
      add(kInFile, source.begin.line,
          fmt::format("{}:{}: {}: {}", file_, source.begin.line, key, what));
    } else {
      add(kNowhere, 0, fmt::format("{}: {}: {}", file_, key, what));
    }
  }
  void add_from_set(const std::string& line) { add(kFromSet, 0, line); }
  bool empty() const { return problems_.empty(); }
  std::vector<std::string> take() {
    std::stable_sort(problems_.begin(), problems_.end(), [](const Entry& a, const Entry& b) {
      return std::tie(a.origin, a.line) < std::tie(b.origin, b.line);
    });
    std::vector<std::string> lines;
    for (Entry& entry : problems_) lines.push_back(std::move(entry.text));
    problems_.clear();
    return lines;
  }

 private:
  enum Origin { kInFile, kFromSet, kNowhere };
  struct Entry {
    Origin origin;
    uint32_t line;
    std::string text;
  };
  void add(Origin origin, uint32_t line, std::string text) {
    problems_.push_back({origin, line, std::move(text)});
  }

  std::string file_;
  std::vector<Entry> problems_;
};

toml::source_region source_of(const toml::table& root, const std::string& key) {
  const toml::node* node = root.at_path(key).node();
  return node ? node->source() : toml::source_region{};
}

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

// The declared keys by path, and the section paths ("dist", "dist.ddp") that hold them.
struct KeyTable {
  std::map<std::string, const OptionSpec*> by_path;
  std::vector<std::string> paths;
  std::set<std::string> sections;
  std::vector<std::string> top_sections;

  explicit KeyTable(const OptionSpecs& root) {
    for (const KeyPath& key : key_paths(root)) {
      by_path[key.path] = key.key;
      paths.push_back(key.path);
      for (size_t dot = key.path.find('.'); dot != std::string::npos;
           dot = key.path.find('.', dot + 1)) {
        sections.insert(key.path.substr(0, dot));
      }
    }
    for (const OptionSpecs& section : root.sections()) top_sections.push_back(section.name());
  }

  // The sections directly inside `parent` ("": the top-level ones).
  std::vector<std::string> subsections_of(const std::string& parent) const {
    if (parent.empty()) return top_sections;
    std::vector<std::string> inner;
    for (const std::string& section : sections) {
      if (section.size() > parent.size() + 1 && section.compare(0, parent.size(), parent) == 0 &&
          section[parent.size()] == '.' &&
          section.find('.', parent.size() + 1) == std::string::npos) {
        inner.push_back(section);
      }
    }
    return inner;
  }
};

// The problem of an override's key whose sections are not all declared ("dist.zer.stage",
// "foo.bar", "optim.lr.x"), as "--set KEY: problem"; "" otherwise. A misspelt last part is
// left to read_table, which reports it as it reports the file's keys.
std::string override_path_problem(const std::string& key, const KeyTable& keys) {
  std::string parent;
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) {
    const std::string section = key.substr(0, dot);
    if (keys.sections.count(section) > 0) {
      parent = section;
      continue;
    }
    if (keys.by_path.count(section) > 0) {
      return fmt::format("--set {}: {} is a key, not a section; set it as --set {}=VALUE", key,
                         section, section);
    }
    // The whole key respelt where one is near ("dist.zero.stage"), else the section.
    std::string hint = did_you_mean(key, keys.paths);
    if (hint.empty()) hint = did_you_mean(section, keys.subsections_of(parent));
    return fmt::format("--set {}: unknown section {}{}", key, section, hint);
  }
  return "";
}



// "section.key=value": the value is TOML (1e-3, true, [1, 2], "text"), or a bare word.
void apply_override(toml::table& root, const std::string& assignment, const KeyTable& keys,
                    Problems& problems) {
  const size_t equals = assignment.find('=');
  const std::string key = assignment.substr(0, equals);
  const size_t dot = key.find('.');
  if (equals == std::string::npos || dot == std::string::npos || dot == 0 ||
      key.back() == '.' || key.find("..") != std::string::npos) {
    problems.add_from_set(fmt::format("--set {}: expected section.key=value", assignment));
    return;
  }
  const std::string path_problem = override_path_problem(key, keys);
  if (!path_problem.empty()) {
    problems.add_from_set(path_problem);
    return;
  }
  const std::string value = assignment.substr(equals + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value, std::string_view("--set"));
  } catch (const toml::parse_error&) {
    // Not a TOML value: the bare word as a string, escaped (quotes, newlines). Only bytes that
    // are not UTF-8 remain, which no TOML string holds.
    std::string quoted;
    for (const char c : value) {
      const auto byte = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        quoted += '\\';
        quoted += c;
      } else if (byte < 0x20 || byte == 0x7f) {
        quoted += fmt::format("\\u{:04x}", byte);
      } else {
        quoted += c;
      }
    }
    try {
      parsed = toml::parse("v = \"" + quoted + "\"", std::string_view("--set"));
    } catch (const toml::parse_error& e) {
      problems.add_from_set(fmt::format("--set {}: {}", key, e.description()));
      return;
    }
  }
  // Walk (creating) the tables of "a.b.c", then set the last component.
  toml::table* table = &root;
  size_t begin = 0;
  for (size_t next = key.find('.'); next != std::string::npos; next = key.find('.', begin)) {
    const std::string part = key.substr(begin, next - begin);
    if (!table->contains(part)) table->insert(part, toml::table{});
    table = (*table)[part].as_table();
    if (table == nullptr) {
      problems.add_from_set(
          fmt::format("--set {}: [{}] is not a table", key, key.substr(0, next)));
      return;
    }
    begin = next + 1;
  }
  table->insert_or_assign(key.substr(begin), std::move(*parsed.get("v")));
  // Nodes moved out of `parsed` keep its source, so errors on them read "--set key: ...".
}

// Stores every key of `table` (the section at `prefix`), descending into subsections; the keys
// that could not be stored go to `unread`.
void read_table(const toml::table& table, const std::string& prefix, const KeyTable& keys,
                std::set<std::string>& unread, Problems& problems) {
  for (auto&& [name, node] : table) {
    const std::string path = prefix + "." + std::string(name.str());
    const auto found = keys.by_path.find(path);
    if (found != keys.by_path.end()) {
      const std::string problem = read_value(*found->second, node);
      if (problem.empty()) continue;
      problems.add(path, node.source(), problem);
      unread.insert(path);
    } else if (keys.sections.count(path) > 0) {
      if (node.is_table()) {
        read_table(*node.as_table(), path, keys, unread, problems);
      } else {
        problems.add(path, node.source(),
                     fmt::format("is a section, not a key (its keys read {}.KEY)", path));
      }
    } else if (node.is_table()) {
      problems.add(path, node.source(),
                   "unknown section" + did_you_mean(path, keys.subsections_of(prefix)));
    } else {
      problems.add(path, node.source(), "unknown key" + did_you_mean(path, keys.paths));
    }
  }
}

void read_root(const toml::table& root, const KeyTable& keys, std::set<std::string>& unread,
               Problems& problems) {
  for (auto&& [name, node] : root) {
    const std::string section(name.str());
    const toml::table* table = node.as_table();
    if (table == nullptr || keys.sections.count(section) == 0) {
      const std::string hint = did_you_mean(section, table ? keys.top_sections : keys.paths);
      problems.add(section, name.source(),
                   table ? "unknown section" + hint : "keys belong in a [section]" + hint);
      continue;
    }
    read_table(*table, section, keys, unread, problems);
  }
}

// Problems of a section's fields; a key whose value could not be read holds its default and
// has its problem reported already.
void report(const FieldErrors& errors, const std::string& section, const toml::table& root,
            const std::set<std::string>& unread, Problems& problems) {
  for (const FieldError& error : errors) {
    const std::string key = section + "." + error.key;
    if (unread.count(key) == 0) problems.add(key, source_of(root, key), error.problem);
  }
}

// What dist needs to know of the trainer's sections. Autocast is CUDA's: on run.device =
// "cpu" a precision other than fp32 is refused on its own (validate_sections), so dist's rules
// about fp16 loss scaling would only add hints ("use bf16") that a CPU run cannot follow.
dist::DistContext dist_context(const Config& config) {
  dist::DistContext context;
  context.fp16_loss_scaling = config.train.precision == "fp16" && config.run.device != "cpu";
  context.skip_nonfinite = config.train.nonfinite == "skip";
  context.sync_batchnorm = config.model.sync_batchnorm;
  context.bf16_compute = config.train.precision == "bf16";
  context.global_grad_clipping = config.optim.name == "lamb" && config.optim.max_grad_norm > 0;
  return context;
}

// The keys of `section` ("dist") among `written` ("dist.ps.staleness"), as the section names
// them ("ps.staleness").
std::vector<std::string> keys_of(const std::string& section,
                                 const std::vector<std::string>& written) {
  std::vector<std::string> keys;
  const std::string prefix = section + ".";
  for (const std::string& key : written) {
    if (key.rfind(prefix, 0) == 0) keys.push_back(key.substr(prefix.size()));
  }
  return keys;
}

// The keys that the user wrote and that read well: each override's, and the file's, unless
// the file writes every key. Such a file is a resolved config (a run's config.toml,
// --print-config), whose keys at their defaults dtrain wrote, not the user: there only keys
// that differ from their defaults count as chosen.
std::vector<std::string> written_keys(const toml::table& file, const KeyTable& keys,
                                      const std::vector<std::string>& overrides,
                                      const std::set<std::string>& unread) {
  std::vector<std::string> in_file;
  for (const std::string& path : keys.paths) {
    if (file.at_path(path) && unread.count(path) == 0) in_file.push_back(path);
  }
  std::vector<std::string> written;
  if (in_file.size() < keys.paths.size()) written = std::move(in_file);
  for (const std::string& assignment : overrides) {
    const std::string key = assignment.substr(0, assignment.find('='));
    if (keys.by_path.count(key) > 0 && unread.count(key) == 0 &&
        std::find(written.begin(), written.end(), key) == written.end()) {
      written.push_back(key);
    }
  }
  return written;
}

// Every section's validate(), the rules between the trainer's own sections, and warnings of
// keys that have no effect, of those `written` and those not at their defaults.
void validate_sections(const Config& config, const toml::table& root,
                       const std::set<std::string>& unread,
                       const std::vector<std::string>& written, Problems& problems,
                       Problems& warnings) {
  report(config.run.validate(), "run", root, unread, problems);
  report(config.train.validate(), "train", root, unread, problems);
  report(config.model.validate(), "model", root, unread, problems);
  report(config.data.validate(), "data", root, unread, problems);
  report(config.optim.validate(), "optim", root, unread, problems);
  report(config.optim.unused_keys(keys_of("optim", written)), "optim", root, unread, warnings);
  report(config.schedule.validate(), "schedule", root, unread, problems);
  report(config.dist.validate(dist_context(config)), "dist", root, unread, problems);
  report(config.dist.unused_keys(keys_of("dist", written)), "dist", root, unread, warnings);
  report(config.debug.validate(), "debug", root, unread, problems);

  if (config.train.precision != "fp32" && config.run.device == "cpu") {
    problems.add("train.precision", source_of(root, "train.precision"),
                 fmt::format("\"{}\" autocast needs CUDA, but run.device = \"cpu\"; use "
                             "\"fp32\" on CPU",
                             config.train.precision));
  }
  if (config.train.cuda_graph == "on") {
    std::vector<std::string> blockers = cuda_graph_blockers(config);
    if (config.run.device == "cpu") {
      blockers.insert(blockers.begin(),
                      "\"on\" needs run.device = \"cuda\" (or \"auto\" on a GPU)");
    }
    for (const std::string& problem : blockers) {
      problems.add("train.cuda_graph", source_of(root, "train.cuda_graph"), problem);
    }
  }
  if (config.dist.strategy == dist::StrategyKind::kPs && config.dist.ps.partial_reads() &&
      config.optim.name != "sgd") {
    // A round in progress is sent as SGD's step would leave it (dist/ps/shard.h); the others
    // keep state a preview would have to copy, or need every server at once (LARS's norms).
    problems.add("dist.ps.ssp_reads", source_of(root, "dist.ps.ssp_reads"),
                 fmt::format("\"partial\" previews a round with SGD's update; optim.name = "
                             "\"{}\": use \"sgd\", or ssp_reads = \"newest\"",
                             config.optim.name));
  }
  if (config.dist.strategy == dist::StrategyKind::kPs && config.dist.ps.transport == "p2p" &&
      (config.optim.name == "lars" || config.optim.name == "lamb")) {
    // Their trust ratios need every server's share of a tensor's norm at once: a collective
    // the servers of the p2p transport, each stepping on its own thread, do not run.
    problems.add("dist.ps.transport", source_of(root, "dist.ps.transport"),
                 fmt::format("\"p2p\" with optim.name = \"{}\": its norms span the servers; "
                             "use transport \"collectives\" or \"messages\", or \"sgd\" "
                             "or \"adamw\"",
                             config.optim.name));
  }
  const dist::CompressionOptions& compression = config.dist.compression;
  const bool optimizer_momentum = config.optim.name == "sgd" || config.optim.name == "lars";
  if (config.dist.strategy != dist::StrategyKind::kSingle && compression.kind == "topk" &&
      compression.error_feedback && compression.momentum > 0 && optimizer_momentum &&
      config.optim.momentum > 0) {
    // DGC's momentum correction accumulates the momentum before compression
    // (dist/compression/topk.cpp): the optimizer's own would apply it a second time.
    warnings.add("dist.compression.momentum", source_of(root, "dist.compression.momentum"),
                 fmt::format("DGC's momentum correction with optim.momentum = {} (optim.name = "
                             "\"{}\") applies momentum twice; give the optimizer none: "
                             "optim.momentum = 0{}",
                             config.optim.momentum, config.optim.name,
                             config.optim.nesterov ? " and optim.nesterov = false" : ""));
  }
  if (config.model.name == "simple_cnn" && config.model.zero_init_residual) {
    warnings.add("model.zero_init_residual", source_of(root, "model.zero_init_residual"),
                 "has no effect on simple_cnn (it has no residual blocks)");
  }
}

}  // namespace

std::vector<std::string> cuda_graph_blockers(const Config& config) {
  std::vector<std::string> blockers;
  // DDP's all-reduces are captured with backward (dist::Strategy::after_graph_pass); the other
  // strategies act inside forward or backward in ways a graph cannot repeat (ZeRO's gathers
  // into memory it frees, the parameter server's host-side protocol).
  const dist::StrategyKind strategy = config.dist.strategy;
  if (strategy != dist::StrategyKind::kSingle && strategy != dist::StrategyKind::kDdp) {
    blockers.push_back(fmt::format("captures dist.strategy = \"single\" or \"ddp\", not \"{}\"",
                                   dist::strategy_name(strategy)));
  }
  if (strategy == dist::StrategyKind::kDdp && config.dist.compression.enabled()) {
    blockers.push_back("captures ddp without gradient compression: dist.compression.kind = "
                       "\"none\"");
  }
  if (strategy == dist::StrategyKind::kDdp && config.model.sync_batchnorm) {
    blockers.push_back("model.sync_batchnorm communicates inside forward: set it false");
  }
  if (config.train.grad_accum != 1) {
    blockers.push_back("captures one micro-step: needs train.grad_accum = 1");
  }
  if (config.train.precision == "fp16") {
    blockers.push_back(
        "fp16 loss scaling reads the host every step: use \"bf16\" or \"fp32\"");
  }
  if (config.train.nonfinite == "skip") {
    blockers.push_back(
        "train.nonfinite = \"skip\" reads the loss on the host every step: use \"stop\"");
  }
  if (!config.debug.nan_loss_steps.empty() || !config.debug.slow_ranks.empty()) {
    blockers.push_back("the debug faults and stragglers are not captured: leave debug.* empty");
  }
  return blockers;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   std::vector<std::string>& warnings) {
  toml::table root = read_file(path);
  const toml::table as_in_file = root;
  const std::string file = path.empty() ? "<defaults>" : path;
  Problems problems(file);
  Problems warned(file);
  Config config;
  const OptionSpecs declared = config_keys(config);
  const KeyTable keys(declared);
  for (const std::string& assignment : overrides) {
    apply_override(root, assignment, keys, problems);
  }
  std::set<std::string> unread;
  read_root(root, keys, unread, problems);
  validate_sections(config, root, unread, written_keys(as_in_file, keys, overrides, unread),
                    problems, warned);
  warnings = warned.take();
  if (!problems.empty()) throw ConfigError(problems.take());
  // Defaults that depend on another key take their value now, so that the saved config.toml
  // and the ranks' agreement check see what the run uses.
  config.optim = config.optim.resolved();
  config.dist = config.dist.resolved(dist_context(config));
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::vector<std::string> warnings;
  Config config = load_config(path, overrides, warnings);
  for (const std::string& warning : warnings) log::warn("{}", warning);
  return config;
}

std::string to_toml(const Config& config) {
  Config copy = config;  // config_keys() binds fields for writing; to_toml only reads them
  const OptionSpecs declared = config_keys(copy);
  toml::table root;
  for (const KeyPath& key : key_paths(declared)) {
    toml::table* table = &root;
    size_t begin = 0;
    for (size_t dot = key.path.find('.'); dot != std::string::npos;
         dot = key.path.find('.', begin)) {
      const std::string part = key.path.substr(begin, dot - begin);
      if (!table->contains(part)) table->insert(part, toml::table{});
      table = (*table)[part].as_table();
      begin = dot + 1;
    }
    write_value(*key.key, *table, key.path.substr(begin));
  }
  // 15 significant digits, which every decimal a user writes survives: optim.lr = 0.3 is
  // saved as 0.3, not as the 17 digits of the nearest double (0.29999999999999999).
  std::ostringstream out;
  out << toml::toml_formatter{root, toml::toml_formatter::default_flags |
                                        toml::format_flags::relaxed_float_precision}
      << '\n';
  return out.str();
}

std::string describe_keys(bool markdown) {
  Config defaults;
  const OptionSpecs declared = config_keys(defaults);
  std::ostringstream out;
  std::string section;
  if (markdown) {
    out << "| key | type | default | allowed | description |\n|---|---|---|---|---|\n";
  }
  for (const KeyPath& key : key_paths(declared)) {
    const std::string allowed = key.key->allowed();
    if (markdown) {
      out << fmt::format("| `{}` | {} | `{}` | {} | {} |\n", key.path, key.key->type(),
                         value_text(*key.key), allowed, key.key->help);
      continue;
    }
    const size_t dot = key.path.rfind('.');
    if (key.path.substr(0, dot) != section) {
      section = key.path.substr(0, dot);
      out << (out.tellp() > 0 ? "\n" : "") << "[" << section << "]\n";
    }
    out << fmt::format("{} = {}  # {}{}\n", key.path.substr(dot + 1), value_text(*key.key),
                       key.key->help, allowed.empty() ? "" : "; allowed: " + allowed);
  }
  return out.str();
}

}  // namespace dtrain::trainer
