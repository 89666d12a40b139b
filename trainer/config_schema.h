// The table of config keys: for each, its TOML path, a description, and how to read it from
// TOML into the field of a Config it is bound to, and how to write it back.
#pragma once

#include "trainer/options.h"

#include <toml++/toml.h>

#include <functional>
#include <string>
#include <vector>

namespace dtrain::trainer {

struct ConfigKey {
  std::string path;  // "section.key"
  std::string type;  // "int", "float", "bool", "string", "int list"
  std::string help;
  // Stores `node` into the bound field; returns a problem, or "" on success.
  std::function<std::string(const toml::node& node)> set;
  // Inserts the bound field's current value into `table` under `name`.
  std::function<void(toml::table& table, const std::string& name)> put;
};

// Every key, bound to the fields of `config`, in documentation order.
std::vector<ConfigKey> config_keys(Config& config);

}  // namespace dtrain::trainer
