#include "trainer/toml_binding.h"

#include <fmt/format.h>

#include <sstream>
#include <type_traits>

namespace dtrain::trainer {

namespace {

std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

std::string expected(const char* what, const toml::node& node) {
  return fmt::format("expected {}, got {}", what, type_name(node));
}

std::string read(int64_t* field, const toml::node& node) {
  if (!node.is_integer()) return expected("an integer", node);
  *field = node.as_integer()->get();
  return "";
}

// An integer is accepted where a float is expected (lr = 1).
std::string read(double* field, const toml::node& node) {
  if (node.is_integer()) {
    *field = static_cast<double>(node.as_integer()->get());
  } else if (node.is_floating_point()) {
    *field = node.as_floating_point()->get();
  } else {
    return expected("a number", node);
  }
  return "";
}

std::string read(bool* field, const toml::node& node) {
  if (!node.is_boolean()) return expected("true or false", node);
  *field = node.as_boolean()->get();
  return "";
}

std::string read(std::string* field, const toml::node& node) {
  if (!node.is_string()) return expected("a string", node);
  *field = node.as_string()->get();
  return "";
}

std::string read(std::vector<int64_t>* field, const toml::node& node) {
  const toml::array* array = node.as_array();
  if (array == nullptr) return expected("an array of integers", node);
  std::vector<int64_t> values;
  for (const toml::node& element : *array) {
    if (!element.is_integer()) return expected("an array of integers", node);
    values.push_back(element.as_integer()->get());
  }
  *field = std::move(values);
  return "";
}

void add_paths(const OptionSpecs& section, const std::string& prefix, std::vector<KeyPath>& out) {
  for (const OptionSpec& key : section.keys()) out.push_back({prefix + key.name, &key});
  for (const OptionSpecs& inner : section.sections()) {
    add_paths(inner, prefix + inner.name() + ".", out);
  }
}

}  // namespace

std::vector<KeyPath> key_paths(const OptionSpecs& root) {
  std::vector<KeyPath> paths;
  add_paths(root, "", paths);
  return paths;
}

std::string read_value(const OptionSpec& key, const toml::node& node) {
  return std::visit(
      [&](const auto& field) -> std::string {
        if constexpr (std::is_same_v<std::decay_t<decltype(field)>, EnumField>) {
          if (!node.is_string()) return expected("a string", node);
          return key.set_enum(node.as_string()->get());
        } else {
          return read(field, node);
        }
      },
      key.field);
}

void write_value(const OptionSpec& key, toml::table& table, const std::string& name) {
  std::visit(
      [&](const auto& field) {
        using Field = std::decay_t<decltype(field)>;
        if constexpr (std::is_same_v<Field, EnumField>) {
          table.insert(name, key.choices[field.get()]);
        } else if constexpr (std::is_same_v<Field, std::vector<int64_t>*>) {
          toml::array array;
          for (int64_t value : *field) array.push_back(value);
          table.insert(name, std::move(array));
        } else {
          table.insert(name, *field);
        }
      },
      key.field);
}

std::string value_text(const OptionSpec& key) {
  // toml++ prints floats with 17 digits (0.10000000000000001); fmt's shortest form round-trips.
  if (const auto* real = std::get_if<double*>(&key.field)) {
    const std::string text = fmt::format("{}", **real);
    const bool looks_integral = text.find_first_of(".eni") == std::string::npos;
    return looks_integral ? text + ".0" : text;
  }
  toml::table holder;
  write_value(key, holder, "v");
  std::ostringstream text;
  holder.get("v")->visit([&text](const auto& node) { text << node; });
  return text.str();
}

}  // namespace dtrain::trainer
