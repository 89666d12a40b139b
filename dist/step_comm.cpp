#include "dist/step_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace dtrain::dist {

namespace {

// Ring algorithms: fraction of the payload each rank sends (and receives).
double ring_factor(Collective kind, double n) {
  switch (kind) {
    case Collective::kAllReduce: return 2.0 * (n - 1.0) / n;
    case Collective::kReduceScatter:
    case Collective::kAllGather: return (n - 1.0) / n;
    default: return 1.0;
  }
}

const char* collective_name(Collective kind) {
  switch (kind) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "all_gather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kSend: return "send";
    case Collective::kRecv: return "recv";
  }
  return "?";
}

const char* traffic_name(Traffic traffic) {
  switch (traffic) {
    case Traffic::kGradients: return "gradients";
    case Traffic::kParameters: return "parameters";
    case Traffic::kSmall: return "buffers";
    case Traffic::kPrefetched: return "parameters, prefetched";
  }
  return "?";
}

// The time the intervals cover together. The gradient traffic after backward counts only while
// some of it is in flight: a gap before an operation starts (the host launching it, or a
// progress thread the OS has not yet run) is the host's time, not communication's, so the
// exposed figure never exceeds the operations' own time.
double covered_ms(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double covered = 0.0, reached = 0.0;
  for (const auto& [start, end] : intervals) {
    covered += std::max(0.0, end - std::max(start, reached));
    reached = std::max(reached, end);
  }
  return covered;
}

}  // namespace

void StepComm::add(Collective kind, Traffic traffic, int64_t bytes, std::unique_ptr<Work> work,
                   int root) {
  ops_.push_back({kind, traffic, bytes, root, std::move(work), rank_, ranks_});
}

void StepComm::add_unmeasured(Collective kind, Traffic traffic, int64_t bytes) {
  ops_.push_back({kind, traffic, bytes, 0, nullptr, rank_, ranks_});
}

void StepComm::add_untimed(Collective kind, Traffic traffic, int64_t bytes, int root) {
  ops_.push_back({kind, traffic, bytes, root, nullptr, rank_, ranks_, nullptr, /*untimed=*/true});
}

void StepComm::add_pipelined(Collective kind, Traffic traffic, int64_t bytes,
                             std::unique_ptr<Work> work, int root) {
  ops_.push_back({kind, traffic, bytes, root, std::move(work), rank_, ranks_});
  ops_.back().pipelined = true;
}

void StepComm::add_wait(std::shared_ptr<const TimePoint> start,
                        std::shared_ptr<const TimePoint> end) {
  waits_.emplace_back(std::move(start), std::move(end));
}

void StepComm::add_prefetched(Collective kind, int64_t bytes, std::unique_ptr<Work> work,
                              std::shared_ptr<const TimePoint> wait_start) {
  ops_.push_back({kind, Traffic::kPrefetched, bytes, 0, std::move(work), rank_, ranks_,
                  std::move(wait_start)});
}

void StepComm::add_in_group(int rank, int ranks, Collective kind, Traffic traffic, int64_t bytes,
                            std::unique_ptr<Work> work, int root) {
  ops_.push_back({kind, traffic, bytes, root, std::move(work), rank, ranks});
}

Stats StepComm::stats() const {
  double bytes = 0.0, sent = 0.0, received = 0.0, ms = 0.0, bulk_ms = 0.0, bus_bytes = 0.0;
  double blocking_ms = 0.0;
  std::vector<std::pair<double, double>> gradient_tail;  // in flight after backward, from its end
  std::vector<std::pair<double, double>> pipelined;      // in flight in this step, from its start
  bool measured = true;
  for (const Op& op : ops_) {
    measured = measured && (op.work || op.untimed);
    double op_ms = op.work ? measured_ms(*op.work->started(), *op.work->finished()) : 0.0;
    if (op.pipelined && op.work && origin_) {
      const double end = measured_ms(*origin_, *op.work->finished());
      const double start = std::min(end, measured_ms(*origin_, *op.work->started()));
      if (end > 0.0) pipelined.emplace_back(std::max(0.0, start), end);
      op_ms = 0.0;  // counted below, once for the overlapping ones
    }
    const double payload = static_cast<double>(op.bytes);
    const double n = op.ranks;
    ms += op_ms;
    switch (op.kind) {
      case Collective::kBroadcast:
        received += op.rank == op.root ? 0.0 : payload;
        sent += op.rank == (op.root + op.ranks - 1) % op.ranks ? 0.0 : payload;
        break;
      case Collective::kReduce:  // the broadcast's chain, reversed
        sent += op.rank == op.root ? 0.0 : payload;
        received += op.rank == (op.root + 1) % op.ranks ? 0.0 : payload;
        break;
      case Collective::kSend: sent += payload; break;
      case Collective::kRecv: received += payload; break;
      default:
        sent += payload * ring_factor(op.kind, n);
        received += payload * ring_factor(op.kind, n);
    }
    if (op.traffic == Traffic::kSmall) {
      blocking_ms += op_ms;
      continue;
    }
    bytes += payload;
    if (op.untimed) continue;  // bytes moved in no time this step measured
    bus_bytes += payload * ring_factor(op.kind, n);
    bulk_ms += op_ms;
    if (op.pipelined) {
      continue;  // exposed through the strategy's waits only
    } else if (op.traffic == Traffic::kParameters) {
      blocking_ms += op_ms;
    } else if (op.traffic == Traffic::kPrefetched) {
      // The part of the gather's own time this rank waited for: a gather whose transfer began
      // only after the wait did (a busy progress thread) is exposed at most whole.
      blocking_ms += std::clamp(measured_ms(*op.wait_start, *op.work->finished()), 0.0, op_ms);
    } else if (backward_end_ && op.work) {
      const double end = measured_ms(*backward_end_, *op.work->finished());
      if (end > 0.0) {
        const double start = measured_ms(*backward_end_, *op.work->started());
        gradient_tail.emplace_back(std::max(0.0, start), end);
      }
    }
  }
  const double pipelined_ms = covered_ms(std::move(pipelined));
  ms += pipelined_ms;
  bulk_ms += pipelined_ms;
  for (const auto& [start, end] : waits_) blocking_ms += std::max(0.0, measured_ms(*start, *end));
  Stats stats = {{"comm/bytes", bytes},
                 {"comm/sent_bytes", sent},
                 {"comm/recv_bytes", received},
                 {"comm/collectives", static_cast<double>(ops_.size())}};
  if (!measured) return stats;
  stats.push_back({"comm/ms", ms});
  stats.push_back({"comm/exposed_ms", covered_ms(std::move(gradient_tail)) + blocking_ms});
  stats.push_back(
      {"comm/busbw_gbps", bulk_ms > 0.0 ? bus_bytes / (bulk_ms * 1e-3) / 1e9 : 0.0});
  return stats;
}

std::vector<Span> StepComm::spans() const {
  std::vector<Span> spans;
  if (!origin_) return spans;
  for (const Op& op : ops_) {
    if (!op.work) continue;
    spans.push_back({fmt::format("{} {:.1f} MiB ({})", collective_name(op.kind),
                                 static_cast<double>(op.bytes) / (1 << 20),
                                 traffic_name(op.traffic)),
                     measured_ms(*origin_, *op.work->started()),
                     measured_ms(*op.work->started(), *op.work->finished())});
  }
  return spans;
}

}  // namespace dtrain::dist
