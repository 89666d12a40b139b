// metrics.jsonl: one JSON object per line, namespaced keys ("loss/train",
// "throughput/img_per_s", ...), flushed per record so a crashed run keeps its history; and
// beside it metrics.csv, the same records in long form (kind,step,key,value: one row per
// figure), for spreadsheets and pandas (`pivot_table(index="step", columns="key")`).
#pragma once

#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::trainer {

using MetricFields = std::vector<std::pair<std::string, double>>;

class MetricsWriter {
 public:
  // Appends to `path` and to the .csv beside it (a resumed run continues the same files).
  // Empty path: writes nothing.
  explicit MetricsWriter(const std::string& path);
  // {"kind": kind, "step": step, <fields>...}
  void write(const std::string& kind, int64_t step, const MetricFields& fields);
  // For a run resumed at `step`: drops the records of later steps, which the run replays, and
  // the final record, which it writes again; and a line cut short by a crash.
  void resume_at(int64_t step);

 private:
  // Rewrites the .csv from the JSON records (after resume_at dropped some).
  void rewrite_csv();

  std::string path_;
  std::string csv_path_;
  std::ofstream out_;
  std::ofstream csv_;
};

}  // namespace dtrain::trainer
