// Config keys declared once, by the options struct that owns them: name, bound field (its
// initializer is the default), allowed range or values, one line of help. trainer/ reads, writes
// and documents keys through them and validate() derives its checks from them; no TOML here.
#pragma once

#include "common/error.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <variant>
#include <vector>

namespace dtrain {

// An enum field seen through its value's index in OptionSpec::choices (the enum's name table).
struct EnumField {
  std::function<size_t()> get;
  std::function<void(size_t)> set;
};

// The field a key is bound to; the alternative held is the key's type.
using OptionField =
    std::variant<int64_t*, double*, bool*, std::string*, std::vector<int64_t>*, EnumField>;

struct OptionSpec {
  std::string name;  // relative to its section: "lr", "bucket_mb"
  OptionField field;
  std::string help;  // one line
  // Bounds of an int or float key, or of each element of an int list: inclusive, except max
  // when max_exclusive (set by below()). A float key with any bound must also be finite.
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool max_exclusive = false;
  // The values a string key may take; an enum key's names, in the order of its values.
  std::vector<std::string> choices;

  // Chained onto OptionSpecs::add: `keys.add("lr", &lr, "...").range(0, 1e3);`
  OptionSpec& range(double minimum, double maximum);
  OptionSpec& at_least(double minimum);
  // [minimum, maximum): a decay rate in [0, 1), where 1 would never forget.
  OptionSpec& below(double minimum, double maximum);
  OptionSpec& one_of(std::vector<std::string> values);

  // "int", "float", "bool", "string", "int list", or "enum" (a key with choices).
  std::string type() const;
  // The declared range or choices as text ("[0, 1]", "[0, 1)", ">= 1", "sgd, adamw"); "" if
  // none.
  std::string allowed() const;
  // The bound value's problem with the declared range or choices; "" if none.
  std::string check() const;
  // Stores the enum value named `value` in the bound enum field; returns the problem if
  // `value` is not one of its names (with a "did you mean" for a misspelling).
  std::string set_enum(const std::string& value) const;
  // Whether `other`, a declaration of the same key on another object, holds the same value.
  bool same_value(const OptionSpec& other) const;
};

// One config section's keys, in documentation order, and its subsections ([dist] holds
// [dist.ddp]). An options struct fills one in `void declare(OptionSpecs& keys)`, binding its
// own fields; the struct must outlive the declaration.
class OptionSpecs {
 public:
  explicit OptionSpecs(std::string name = "") : name_(std::move(name)) {}

  OptionSpec& add(std::string name, int64_t* field, std::string help);
  OptionSpec& add(std::string name, double* field, std::string help);
  OptionSpec& add(std::string name, bool* field, std::string help);
  OptionSpec& add(std::string name, std::string* field, std::string help);
  OptionSpec& add(std::string name, std::vector<int64_t>* field, std::string help);
  // An enum with values 0 .. N-1, named in that order by `names`.
  template <typename Enum, size_t N>
  OptionSpec& add(std::string name, Enum* field, const std::array<const char*, N>& names,
                  std::string help) {
    OptionSpec& spec = add_field(std::move(name),
                                 EnumField{[field] { return static_cast<size_t>(*field); },
                                           [field](size_t index) {
                                             *field = static_cast<Enum>(index);
                                           }},
                                 std::move(help));
    spec.choices.assign(names.begin(), names.end());
    return spec;
  }
  // The keys `options.declare()` declares, as the subsection `name`.
  template <typename Options>
  void add_section(std::string name, Options& options) {
    sections_.emplace_back(std::move(name));
    options.declare(sections_.back());
  }

  const std::string& name() const { return name_; }
  const std::vector<OptionSpec>& keys() const { return keys_; }
  const std::vector<OptionSpecs>& sections() const { return sections_; }

  // Range and choice problems of this section's own keys; each subsection's struct checks
  // its keys in its own validate().
  FieldErrors check() const;
  // The keys, subsections' ones included ("ddp.overlap"), whose values differ from those
  // bound in `other`, a declaration of the same struct.
  std::vector<std::string> changed_from(const OptionSpecs& other) const;

 private:
  OptionSpec& add_field(std::string name, OptionField field, std::string help);

  std::string name_;
  std::vector<OptionSpec> keys_;
  std::vector<OptionSpecs> sections_;
};

// What the declaration of `Options` checks of `options`: where validate() starts.
template <typename Options>
FieldErrors check_declared(const Options& options) {
  Options copy = options;  // declare() binds fields for writing; the checks only read a copy
  OptionSpecs keys;
  copy.declare(keys);
  return keys.check();
}

// The keys of `options` set to something other than their defaults ("ddp.overlap").
template <typename Options>
std::vector<std::string> changed_keys(const Options& options) {
  Options copy = options;
  Options defaults;
  OptionSpecs keys;
  OptionSpecs default_keys;
  copy.declare(keys);
  defaults.declare(default_keys);
  return keys.changed_from(default_keys);
}

// changed_keys(), then those of `written` not among them, in their order.
template <typename Options>
std::vector<std::string> changed_or_written_keys(const Options& options,
                                                 const std::vector<std::string>& written) {
  std::vector<std::string> keys = changed_keys(options);
  for (const std::string& key : written) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  return keys;
}

}  // namespace dtrain
