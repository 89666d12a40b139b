#include "trainer/timeline.h"

#include "common/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace dtrain::trainer {

namespace {

std::string rank_file(const std::string& dir, int rank) {
  return fmt::format("{}/timeline.rank{}.json", dir, rank);
}

}  // namespace

Timeline::Timeline(bool enabled, std::string dir, int rank)
    : enabled_(enabled), dir_(std::move(dir)), rank_(rank), step_origin_us_(now_us()) {}

// The monotonic clock's own count: the ranks of one machine share it, so their tracks align.
double Timeline::now_us() const {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Timeline::Phase::Phase(Timeline& timeline, const char* name)
    : timeline_(timeline), name_(name), start_us_(timeline.enabled_ ? timeline.now_us() : 0.0) {}

Timeline::Phase::~Phase() {
  if (!timeline_.enabled_) return;
  timeline_.events_.push_back({name_, start_us_, timeline_.now_us() - start_us_, 0});
}

void Timeline::add_step_spans(const std::vector<dist::Span>& spans) {
  if (!enabled_) return;
  for (const dist::Span& span : spans) {
    events_.push_back(
        {span.name, step_origin_us_ + 1e3 * span.start_ms, 1e3 * span.duration_ms, 1});
  }
  step_origin_us_ = now_us();
}

void Timeline::write() const {
  if (!enabled_) return;
  nlohmann::json events = nlohmann::json::array();
  const char* tracks[] = {"host", "communication"};
  for (int tid = 0; tid < 2; ++tid) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank_}, {"tid", tid},
                      {"args", {{"name", tracks[tid]}}}});
  }
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank_}, {"tid", 0},
                    {"args", {{"name", fmt::format("rank {}", rank_)}}}});
  for (const Event& event : events_) {
    events.push_back({{"ph", "X"}, {"name", event.name}, {"pid", rank_}, {"tid", event.track},
                      {"ts", event.start_us}, {"dur", event.duration_us}});
  }
  std::ofstream out(rank_file(dir_, rank_));
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
  if (!out) {
    throw UserError(
        fmt::format("{}: cannot write: {}", rank_file(dir_, rank_), std::strerror(errno)));
  }
}

void Timeline::merge(const std::string& dir) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("timeline.rank", 0) != 0) continue;
    std::ifstream in(entry.path());
    nlohmann::json rank = nlohmann::json::parse(in);
    for (auto& event : rank["traceEvents"]) all.push_back(std::move(event));
  }
  std::ofstream out(dir + "/timeline.json");
  out << nlohmann::json{{"traceEvents", all}, {"displayTimeUnit", "ms"}}.dump();
  if (!out) {
    throw UserError(fmt::format("{}/timeline.json: cannot write: {}", dir, std::strerror(errno)));
  }
}

}  // namespace dtrain::trainer
