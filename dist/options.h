// Options of the dist layer (config section [dist]).
#pragma once

#include "common/error.h"

#include <string>

namespace dtrain::dist {

struct DistOptions {
  // How workers cooperate. "single": one rank, no communication.
  std::string strategy = "single";
  // Upper bound on any collective; a rank that never joins ends the job after this long.
  double timeout_s = 300.0;

  FieldErrors validate() const;
};

}  // namespace dtrain::dist
