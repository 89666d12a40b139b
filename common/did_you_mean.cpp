#include "common/did_you_mean.h"

#include <fmt/format.h>

#include <algorithm>

namespace dtrain {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

size_t common_prefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

std::string did_you_mean(const std::string& wrong, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = std::max<size_t>(3, wrong.size() / 3) + 1;
  size_t best_prefix = 0;
  for (const std::string& candidate : known) {
    const size_t distance = edit_distance(wrong, candidate);
    const size_t prefix = common_prefix(wrong, candidate);
    if (distance < best_distance || (distance == best_distance && prefix > best_prefix)) {
      best = candidate;
      best_distance = distance;
      best_prefix = prefix;
    }
  }
  return best.empty() ? "" : fmt::format(" (did you mean {}?)", best);
}

}  // namespace dtrain
