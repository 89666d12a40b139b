// Logging: rank 0 writes to the terminal; every rank can also write to its own log file.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace dtrain::log {

enum class Level { kDebug, kInfo, kWarn, kError };

// Messages below `level` are dropped. Ranks other than 0 print only warnings and errors
// to stderr unless `all_ranks` is set; everything always reaches the rank's log file.
void configure(int rank, Level level, bool all_ranks = false);
// Also append every message to `path` (created with its parent directory), beginning with
// those written before it opened.
void open_file(const std::string& path);
// Closes that file; later lines wait for the next open_file, as the early ones do.
void close_file();
// Appends `line` to the log file only (what the caller printed itself, such as progress lines).
void to_file(const std::string& line);
void write(Level level, const std::string& message);
// `count` and `noun`, plural unless the count is 1: counted(1, "shard") is "1 shard",
// counted(4, "unit") "4 units".
std::string counted(int64_t count, const std::string& noun);

template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::kInfo, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::kWarn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::kError, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::kDebug, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace dtrain::log
