// A hint for a misspelt name: the closest of the known names, for config keys and values.
#pragma once

#include <string>
#include <vector>

namespace dtrain {

// " (did you mean NAME?)" for the known name closest to `wrong` by edit distance, ties going to
// the longest shared prefix ("lrate" -> "lr"); "" when none is close enough to be a typo.
std::string did_you_mean(const std::string& wrong, const std::vector<std::string>& known);

}  // namespace dtrain
