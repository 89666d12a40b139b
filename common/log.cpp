#include "common/log.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

namespace dtrain::log {

namespace {

struct State {
  int rank = 0;
  Level level = Level::kInfo;
  bool all_ranks = false;
  std::ofstream file;
  // What was written before the file opened (the start-up banner), so the file has it all.
  std::vector<std::string> early;
  std::mutex mutex;
};

// Caller holds the mutex.
void append(State& s, const std::string& line) {
  if (s.file.is_open()) {
    s.file << line << '\n';
    s.file.flush();
  } else {
    s.early.push_back(line);
  }
}

State& state() {
  static State s;
  return s;
}

const char* prefix(Level level) {
  switch (level) {
    case Level::kDebug: return "debug: ";
    case Level::kInfo: return "";
    case Level::kWarn: return "warning: ";
    case Level::kError: return "error: ";
  }
  return "";
}

}  // namespace

void configure(int rank, Level level, bool all_ranks) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.rank = rank;
  s.level = level;
  s.all_ranks = all_ranks;
}

void open_file(const std::string& path) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  s.file.open(path, std::ios::app);
  for (const std::string& line : s.early) s.file << line << '\n';
  s.early.clear();
  s.file.flush();
}

void close_file() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.file.close();
}

void to_file(const std::string& line) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  append(s, line);
}

void write(Level level, const std::string& message) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  append(s, prefix(level) + message);
  if (level < s.level) return;
  const bool to_terminal = s.rank == 0 || s.all_ranks || level >= Level::kWarn;
  if (!to_terminal) return;
  FILE* stream = level >= Level::kWarn ? stderr : stdout;
  // A message that names its rank itself ("rank 1: ...", as errors do) is not prefixed twice.
  const bool names_rank = message.rfind(fmt::format("rank {}: ", s.rank), 0) == 0;
  if (s.rank != 0 && !names_rank) {
    std::fprintf(stream, "[rank %d] %s%s\n", s.rank, prefix(level), message.c_str());
  } else {
    std::fprintf(stream, "%s%s\n", prefix(level), message.c_str());
  }
  std::fflush(stream);
}

std::string counted(int64_t count, const std::string& noun) {
  return fmt::format("{} {}{}", count, noun, count == 1 ? "" : "s");
}

}  // namespace dtrain::log
