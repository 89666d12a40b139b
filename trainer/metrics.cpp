#include "trainer/metrics.h"

#include "common/error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>

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

constexpr const char* kCsvHeader = "kind,step,key,value\n";

// The .csv path beside "x/metrics.jsonl".
std::string csv_path(const std::string& path) {
  const size_t dot = path.rfind('.');
  return (dot == std::string::npos ? path : path.substr(0, dot)) + ".csv";
}

// The long-form rows of one record.
std::string csv_rows(const std::string& kind, int64_t step, const MetricFields& fields) {
  std::string rows;
  for (const auto& [key, value] : fields) {
    rows += fmt::format("{},{},{},{}\n", kind, step, key, value);
  }
  return rows;
}

void open_csv(std::ofstream& csv, const std::string& path) {
  const bool fresh = !std::ifstream(path).good();
  csv.open(path, std::ios::app);
  if (!csv) throw UserError(path + ": cannot open the metrics file for writing");
  if (fresh) csv << kCsvHeader;
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path) : path_(path), csv_path_(csv_path(path)) {
  if (path.empty()) return;
  out_.open(path, std::ios::app);
  if (!out_) throw UserError(path + ": cannot open the metrics file for writing");
  open_csv(csv_, csv_path_);
}

void MetricsWriter::write(const std::string& kind, int64_t step, const MetricFields& fields) {
  if (!out_.is_open()) return;
  nlohmann::ordered_json record;
  record["kind"] = kind;
  record["step"] = step;
  for (const auto& [key, value] : fields) record[key] = value;
  out_ << record.dump() << '\n';
  out_.flush();
  csv_ << csv_rows(kind, step, fields);
  csv_.flush();
}

void MetricsWriter::rewrite_csv() {
  csv_.close();
  std::string text = kCsvHeader;
  std::ifstream in(path_);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    MetricFields fields;
    for (const auto& [key, value] : record.items()) {
      if (value.is_number() && key != "step") fields.emplace_back(key, value.get<double>());
    }
    text += csv_rows(record.value("kind", ""), record.value("step", int64_t{0}), fields);
  }
  std::ofstream(csv_path_, std::ios::trunc) << text;
  open_csv(csv_, csv_path_);
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
    if (!out) throw UserError(fmt::format("{}: cannot write: {}", temp, std::strerror(errno)));
  }
  if (std::rename(temp.c_str(), path_.c_str()) != 0) {
    throw UserError(fmt::format("cannot rename {} to {}", temp, path_));
  }
  out_.open(path_, std::ios::app);
  if (!out_) throw UserError(path_ + ": cannot open the metrics file for writing");
  rewrite_csv();
}

}  // namespace dtrain::trainer
