// metrics.jsonl: one JSON object per line, namespaced keys ("loss/train",
// "throughput/img_per_s", ...), flushed per record so a crashed run keeps its history.
#pragma once

#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::trainer {

using MetricFields = std::vector<std::pair<std::string, double>>;

class MetricsWriter {
 public:
  // Appends to `path` (a resumed run continues the same file). Empty path: writes nothing.
  explicit MetricsWriter(const std::string& path);
  // {"kind": kind, "step": step, <fields>...}
  void write(const std::string& kind, int64_t step, const MetricFields& fields);
  // For a run resumed at `step`: drops the records of later steps, which the run replays, and
  // the final record, which it writes again; and a line cut short by a crash.
  void resume_at(int64_t step);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace dtrain::trainer
