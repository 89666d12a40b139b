// The TOML side of the declared config keys (common/option_spec.h): their dotted paths,
// reading a node into a key's bound field, writing the field back, its value as TOML text.
#pragma once

#include "common/option_spec.h"

#include <toml++/toml.h>

#include <string>
#include <vector>

namespace dtrain::trainer {

struct KeyPath {
  std::string path;  // "dist.ddp.overlap"
  const OptionSpec* key;
};

// Every key under `root`'s sections with its dotted path, in declaration order.
std::vector<KeyPath> key_paths(const OptionSpecs& root);

// Stores `node` into the field bound to `key`; returns the problem ("expected an integer, got
// a string"), or "" on success. Ranges and string choices are validate()'s to check.
std::string read_value(const OptionSpec& key, const toml::node& node);

// Inserts the bound field's value into `table` under `name`.
void write_value(const OptionSpec& key, toml::table& table, const std::string& name);

// The bound field's value as TOML, floats in their shortest form ("0.1", "'sgd'", "[ 30, 60 ]").
std::string value_text(const OptionSpec& key);

}  // namespace dtrain::trainer
