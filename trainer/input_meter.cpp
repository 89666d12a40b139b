#include "trainer/input_meter.h"

#include <sys/resource.h>

namespace dtrain::trainer {
double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return t.tv_sec + 1e-6 * t.tv_usec; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

void InputMeter::restart(data::Loader& loader) {
  loader.take_stats();
  wait_seconds_ = 0;
  cpu_seconds_at_start_ = process_cpu_seconds();
}

MetricFields InputMeter::fields(data::Loader& loader, int64_t steps, double seconds) {
  MetricFields fields = {
      {"data/wait_ms", 1e3 * wait_seconds_ / static_cast<double>(steps)},
      {"cpu/cores", (process_cpu_seconds() - cpu_seconds_at_start_) / seconds}};
  const data::LoaderStats stats = loader.take_stats();
  if (stats.images > 0) {
    fields.push_back({"data/decode_ms_per_image",
                      1e3 * stats.worker_seconds / static_cast<double>(stats.images)});
  }
  return fields;
}

}  // namespace dtrain::trainer
