#include "common/error.h"

namespace dtrain {

namespace {
int g_rank = 0;
}

void set_error_rank(int rank) { g_rank = rank; }
int error_rank() { return g_rank; }

void throw_check_failure(const char* file, int line, const char* cond,
                         const std::string& message) {
  throw InternalError(fmt::format("rank {}: {}:{}: check failed: {}: {}", g_rank, file, line,
                                  cond, message));
}

}  // namespace dtrain
