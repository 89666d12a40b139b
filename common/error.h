// The two error channels (STYLE.md): typed exceptions for setup, config and data problems,
// caught once in main; DTRAIN_CHECK for invariants, which names rank and file:line.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace dtrain {

// A user-facing problem with input: a config, a dataset file, a command-line flag.
// The message is one line, says what is wrong and what to do; main prints it and exits 2.
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A problem with one option field, before the config layer knows its file and line.
struct FieldError {
  std::string key;  // relative to the options struct, e.g. "lr"
  std::string problem;
};
using FieldErrors = std::vector<FieldError>;

// A failed internal invariant: a bug in dtrain, not bad input. Exit code 1.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// The rank that prefixes internal errors; set once by the runtime.
void set_error_rank(int rank);
int error_rank();

[[noreturn]] void throw_check_failure(const char* file, int line, const char* cond,
                                      const std::string& message);

}  // namespace dtrain

#define DTRAIN_CHECK(cond, ...)                                                   \
  do {                                                                            \
    if (!(cond)) {                                                                \
      ::dtrain::throw_check_failure(__FILE__, __LINE__, #cond,                    \
                                    ::fmt::format(__VA_ARGS__));                  \
    }                                                                             \
  } while (0)
