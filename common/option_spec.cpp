#include "common/option_spec.h"

#include "common/did_you_mean.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (fmt >= 10 keeps it here)

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace dtrain {

namespace {

bool is_int(const OptionField& field) {
  return std::holds_alternative<int64_t*>(field) ||
         std::holds_alternative<std::vector<int64_t>*>(field);
}

// Bounds of int keys print as integers, of float keys in their shortest form ("1e-06").
std::string bound_text(double bound, bool integer) {
  return integer ? fmt::format("{}", static_cast<int64_t>(bound)) : fmt::format("{}", bound);
}

std::string not_one_of(const std::string& value, const std::vector<std::string>& choices) {
  return fmt::format("\"{}\" is not one of: {}{}", value, fmt::join(choices, ", "),
                     did_you_mean(value, choices));
}

// `value` (printed as `shown`) against the bounds of `spec`.
std::string bounds_problem(const OptionSpec& spec, double value, const std::string& shown) {
  const bool integer = is_int(spec.field);
  const bool below_max = spec.max_exclusive ? value < spec.max : value <= spec.max;
  if (value >= spec.min && below_max) return "";
  if (spec.max_exclusive) return fmt::format("{} is outside {}", shown, spec.allowed());
  if (std::isinf(spec.max)) {
    return fmt::format("{} is below the minimum {}", shown, bound_text(spec.min, integer));
  }
  if (std::isinf(spec.min)) {
    return fmt::format("{} is above the maximum {}", shown, bound_text(spec.max, integer));
  }
  return fmt::format("{} is outside {}", shown, spec.allowed());
}

}  // namespace

OptionSpec& OptionSpec::range(double minimum, double maximum) {
  min = minimum;
  max = maximum;
  max_exclusive = false;
  return *this;
}

OptionSpec& OptionSpec::below(double minimum, double maximum) {
  range(minimum, maximum);
  max_exclusive = true;
  return *this;
}

OptionSpec& OptionSpec::at_least(double minimum) {
  return range(minimum, std::numeric_limits<double>::infinity());
}

OptionSpec& OptionSpec::one_of(std::vector<std::string> values) {
  choices = std::move(values);
  return *this;
}

std::string OptionSpec::type() const {
  if (!choices.empty()) return "enum";
  static const char* const kNames[] = {"int", "float", "bool", "string", "int list", "enum"};
  return kNames[field.index()];
}

std::string OptionSpec::allowed() const {
  if (!choices.empty()) return fmt::format("{}", fmt::join(choices, ", "));
  const bool integer = is_int(field);
  if (std::isinf(min) && std::isinf(max)) return "";
  if (std::isinf(max)) return ">= " + bound_text(min, integer);
  if (std::isinf(min)) return "<= " + bound_text(max, integer);
  return fmt::format("[{}, {}{}", bound_text(min, integer), bound_text(max, integer),
                     max_exclusive ? ")" : "]");
}

std::string OptionSpec::check() const {
  if (const auto* text = std::get_if<std::string*>(&field); text && !choices.empty()) {
    const bool known = std::find(choices.begin(), choices.end(), **text) != choices.end();
    return known ? "" : not_one_of(**text, choices);
  }
  if (std::isinf(min) && std::isinf(max)) return "";
  if (const auto* number = std::get_if<int64_t*>(&field)) {
    return bounds_problem(*this, static_cast<double>(**number), fmt::format("{}", **number));
  }
  if (const auto* list = std::get_if<std::vector<int64_t>*>(&field)) {
    for (const int64_t element : **list) {  // the bounds hold for each element
      std::string problem =
          bounds_problem(*this, static_cast<double>(element), fmt::format("{}", element));
      if (!problem.empty()) return problem;
    }
    return "";
  }
  if (const auto* real = std::get_if<double*>(&field)) {
    const std::string shown = fmt::format("{}", **real);
    if (!std::isfinite(**real)) {
      const std::string bounds = allowed();
      return fmt::format("{} is not a finite number; use a value {}{}", shown,
                         bounds.front() == '[' ? "in " : "", bounds);
    }
    return bounds_problem(*this, **real, shown);
  }
  return "";
}

std::string OptionSpec::set_enum(const std::string& value) const {
  const auto found = std::find(choices.begin(), choices.end(), value);
  if (found == choices.end()) return not_one_of(value, choices);
  std::get<EnumField>(field).set(static_cast<size_t>(found - choices.begin()));
  return "";
}

bool OptionSpec::same_value(const OptionSpec& other) const {
  return std::visit(
      [&other](const auto& mine) {
        using Field = std::decay_t<decltype(mine)>;
        const Field& theirs = std::get<Field>(other.field);
        if constexpr (std::is_same_v<Field, EnumField>) {
          return mine.get() == theirs.get();
        } else {
          return *mine == *theirs;
        }
      },
      field);
}

OptionSpec& OptionSpecs::add_field(std::string name, OptionField field, std::string help) {
  OptionSpec spec;
  spec.name = std::move(name);
  spec.field = std::move(field);
  spec.help = std::move(help);
  keys_.push_back(std::move(spec));
  return keys_.back();
}

OptionSpec& OptionSpecs::add(std::string name, int64_t* field, std::string help) {
  return add_field(std::move(name), field, std::move(help));
}

OptionSpec& OptionSpecs::add(std::string name, double* field, std::string help) {
  return add_field(std::move(name), field, std::move(help));
}

OptionSpec& OptionSpecs::add(std::string name, bool* field, std::string help) {
  return add_field(std::move(name), field, std::move(help));
}

OptionSpec& OptionSpecs::add(std::string name, std::string* field, std::string help) {
  return add_field(std::move(name), field, std::move(help));
}

OptionSpec& OptionSpecs::add(std::string name, std::vector<int64_t>* field, std::string help) {
  return add_field(std::move(name), field, std::move(help));
}

FieldErrors OptionSpecs::check() const {
  FieldErrors errors;
  for (const OptionSpec& key : keys_) {
    std::string problem = key.check();
    if (!problem.empty()) errors.push_back({key.name, std::move(problem)});
  }
  return errors;
}

std::vector<std::string> OptionSpecs::changed_from(const OptionSpecs& other) const {
  std::vector<std::string> changed;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (!keys_[i].same_value(other.keys_[i])) changed.push_back(keys_[i].name);
  }
  for (size_t i = 0; i < sections_.size(); ++i) {
    for (const std::string& key : sections_[i].changed_from(other.sections_[i])) {
      changed.push_back(sections_[i].name_ + "." + key);
    }
  }
  return changed;
}

}  // namespace dtrain
