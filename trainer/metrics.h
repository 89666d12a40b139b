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

 private:
  std::ofstream out_;
};

}  // namespace dtrain::trainer
