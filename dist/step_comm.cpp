#include "dist/step_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
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

using Intervals = std::vector<std::pair<double, double>>;

// The time the intervals cover together, overlaps once: operations in flight at once (buckets
// launched together, a gather beside a reduce-scatter) take the wall time they share, not its
// multiple, and a gap with nothing in flight (the host launching the next operation, or a
// progress thread the OS has not yet run) is the host's time, not communication's.
double covered_ms(Intervals intervals) {
  std::sort(intervals.begin(), intervals.end());
  double covered = 0.0, reached = -std::numeric_limits<double>::infinity();
  for (const auto& [start, end] : intervals) {
    covered += std::max(0.0, end - std::max(start, reached));
    reached = std::max(reached, end);
  }
  return covered;
}

void add_interval(Intervals& into, double start, double end) {
  if (end > start) into.emplace_back(start, end);
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

const TimePoint* StepComm::reference() const {
  if (origin_) return origin_.get();
  for (const Op& op : ops_) {
    if (op.work) return op.work->started().get();
  }
  return waits_.empty() ? nullptr : waits_.front().first.get();
}

Stats StepComm::stats() const {
  double bytes = 0.0, sent = served_sent_, received = served_received_, bus_bytes = 0.0;
  // On one clock, from reference(): the step's communication in flight (its waits included),
  // the bandwidth figure's part of it, and the part of it the step waited for.
  Intervals in_flight, bulk, exposed;
  const TimePoint* from = reference();
  const auto at = [from](const TimePoint& when) { return measured_ms(*from, when); };
  bool measured = true;
  for (const Op& op : ops_) {
    measured = measured && (op.work || op.untimed);
    const double payload = static_cast<double>(op.bytes);
    const double n = op.ranks;
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
    if (op.traffic != Traffic::kSmall) bytes += payload;
    if (!op.work) continue;  // unmeasured, or bytes moved in no time this step measured
    const double end = at(*op.work->finished());
    double start = std::min(end, at(*op.work->started()));
    // A pipelined operation counts only from the step's start.
    if (op.pipelined && origin_) start = std::max(0.0, start);
    add_interval(in_flight, start, end);
    if (op.traffic != Traffic::kSmall) {
      bus_bytes += payload * ring_factor(op.kind, n);
      add_interval(bulk, start, end);
    }
    if (op.pipelined) continue;  // exposed through the strategy's waits only
    switch (op.traffic) {
      case Traffic::kSmall:
      case Traffic::kParameters: add_interval(exposed, start, end); break;
      // The part of the gather this rank waited for: a gather whose transfer began only
      // after the wait did (a busy progress thread) is exposed at most whole.
      case Traffic::kPrefetched:
        add_interval(exposed, std::max(start, at(*op.wait_start)), end);
        break;
      case Traffic::kGradients:
        if (backward_end_) add_interval(exposed, std::max(start, at(*backward_end_)), end);
        break;
    }
  }
  for (const auto& [start, end] : waits_) {
    add_interval(in_flight, at(*start), at(*end));
    add_interval(exposed, at(*start), at(*end));
  }
  Stats stats = {{"comm/bytes", bytes},
                 {"comm/sent_bytes", sent},
                 {"comm/recv_bytes", received},
                 {"comm/collectives", static_cast<double>(ops_.size())}};
  if (!measured) return stats;
  const double bulk_ms = covered_ms(std::move(bulk));
  stats.push_back({"comm/ms", covered_ms(std::move(in_flight))});
  stats.push_back({"comm/exposed_ms", covered_ms(std::move(exposed))});
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
