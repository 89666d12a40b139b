#include "trainer/metrics.h"

#include "common/error.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace dtrain::trainer {

namespace {

// Whether `line` is a record a run resumed at `step` keeps.
bool kept(const std::string& line, int64_t step) {
  const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) {
    return false;  // cut short by a crash
  }
  return record["step"].get<int64_t>() <= step && record.value("kind", "") != "final";
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
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

void MetricsWriter::resume_at(int64_t step) {
  if (!out_.is_open()) return;
  out_.close();
  std::string kept_text;
  {
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      if (kept(line, step)) kept_text += line + '\n';
    }
  }
  // Written beside it and renamed over it: a crash now leaves the old file or the new one.
  const std::string temp = path_ + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << kept_text;
    if (!out) throw UserError(temp + ": cannot write");
  }
  if (std::rename(temp.c_str(), path_.c_str()) != 0) {
    throw UserError(fmt::format("cannot rename {} to {}", temp, path_));
  }
  out_.open(path_, std::ios::app);
  if (!out_) throw UserError(path_ + ": cannot open the metrics file for writing");
}

}  // namespace dtrain::trainer
