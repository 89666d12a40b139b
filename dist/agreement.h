// Start-up agreement: every rank must run the same config on the same model, or the job stops
// on every rank with a message that names the ranks and keys that differ.
#pragma once

#include "dist/comm/communicator.h"

#include <string>
#include <vector>

namespace dtrain::dist {

// `lines` are "key = value" (a resolved config, parameter names and shapes). Gathers every
// rank's lines (over a CPU communicator) and, if any rank's differ from rank 0's, throws on
// every rank a UserError naming `what`, each differing rank, and up to a few keys with both
// values. Collective: every rank calls it with its own lines.
void check_same_on_all_ranks(Communicator& comm, const std::string& what,
                             const std::vector<std::string>& lines);

}  // namespace dtrain::dist
