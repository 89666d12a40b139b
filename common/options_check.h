// Small helpers for options validate(): each appends a FieldError when a value is out of range.
#pragma once

#include "common/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (fmt >= 10 keeps it here)

#include <algorithm>
#include <string>
#include <vector>

namespace dtrain {

inline void check_one_of(FieldErrors& errors, const std::string& key, const std::string& value,
                         const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
  errors.push_back({key, fmt::format("\"{}\" is not one of: {}", value,
                                     fmt::join(allowed, ", "))});
}

template <typename T>
void check_at_least(FieldErrors& errors, const std::string& key, T value, T minimum) {
  if (value < minimum) {
    errors.push_back({key, fmt::format("{} is below the minimum {}", value, minimum)});
  }
}

template <typename T>
void check_range(FieldErrors& errors, const std::string& key, T value, T minimum, T maximum) {
  if (value < minimum || value > maximum) {
    errors.push_back({key, fmt::format("{} is outside [{}, {}]", value, minimum, maximum)});
  }
}

}  // namespace dtrain
