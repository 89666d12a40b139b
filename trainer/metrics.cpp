#include "trainer/metrics.h"

#include "common/error.h"

#include <nlohmann/json.hpp>

namespace dtrain::trainer {

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  out_.open(path, std::ios::app);
  if (!out_) throw UserError(path + ": cannot open the metrics file for writing");
}

void MetricsWriter::write(const std::string& kind, int64_t step, const MetricFields& fields) {
  if (!out_.is_open()) return;
  nlohmann::ordered_json record;
  record["kind"] = kind;
  record["step"] = step;
  for (const auto& [key, value] : fields) record[key] = value;
  out_ << record.dump() << '\n';
  out_.flush();
}

}  // namespace dtrain::trainer
