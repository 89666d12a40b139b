// The config layer: TOML file + `--set key=value` overrides -> the typed options structs, through
// the keys each module declares (common/option_spec.h). Every problem is reported in one pass,
// in file order, as `file:line: key: problem`. Nothing below trainer/ sees TOML.
#pragma once

#include "trainer/options.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace dtrain::trainer {

// Every problem found in a config, one `file:line: key: problem` line each. main exits 2.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// Reads `path` (empty: defaults only) and applies `overrides` ("section.key=value", the value
// in TOML syntax, bare words taken as strings). Throws ConfigError. Keys that are valid but
// have no effect (a key of a strategy other than the chosen one) are logged as warnings.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);
// The same, handing the warnings (`file:line: key: problem`) to the caller instead.
Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   std::vector<std::string>& warnings);

// Why train.cuda_graph cannot capture this config's step (trainer/graphed_step.h), the device
// aside: one line each, empty when it can.
std::vector<std::string> cuda_graph_blockers(const Config& config);

// The resolved config as TOML, every key present (saved beside each run).
std::string to_toml(const Config& config);

// Every key with its default and a one-line description, as commented TOML
// (markdown = true: as the table of docs/CONFIG.md).
std::string describe_keys(bool markdown);

}  // namespace dtrain::trainer
