#include "dist/compression/powersgd_plan.h"

#include "common/error.h"

#include <algorithm>
#include <numeric>

namespace dtrain::dist::compression {

namespace {

struct Span {
  int64_t offset, numel;
};

// The chunk rows of `spans`, in order.
std::vector<int64_t> chunk_rows(const std::vector<Span>& spans, int64_t chunk) {
  std::vector<int64_t> rows;
  for (const Span& span : spans) {
    for (int64_t row = span.offset / chunk; row < (span.offset + span.numel) / chunk; ++row) {
      rows.push_back(row);
    }
  }
  return rows;
}

// Of the exact `rows` (ascending), those in `kept`: where they start among them, and their
// rows in the kept part.
void keep_exact_rows(PowerSgdPlan& plan, const std::vector<int64_t>& rows, torch::Device device) {
  const int64_t first_row = plan.kept.offset / plan.chunk;
  const int64_t end_row = plan.kept.end() / plan.chunk;
  const auto begin = std::lower_bound(rows.begin(), rows.end(), first_row);
  const auto end = std::lower_bound(begin, rows.end(), end_row);
  plan.kept_exact_first = begin - rows.begin();
  std::vector<int64_t> kept;
  for (auto row = begin; row != end; ++row) kept.push_back(*row - first_row);
  plan.kept_exact_chunks = torch::tensor(kept, torch::kInt64).to(device);
}

}  // namespace

bool compressed_at(const std::vector<int64_t>& shape, int64_t rank) {
  if (shape.size() < 2) return false;
  int64_t numel = 1;
  for (const int64_t size : shape) numel *= size;
  const int64_t rows = shape[0];
  const int64_t cols = rows == 0 ? 0 : numel / rows;
  const int64_t r = std::min({rank, rows, cols});
  return (rows + cols) * r < rows * cols;
}

bool any_compressed(const std::vector<std::vector<int64_t>>& shapes, int64_t rank) {
  return std::any_of(shapes.begin(), shapes.end(),
                     [rank](const std::vector<int64_t>& shape) {
                       return compressed_at(shape, rank);
                     });
}

PowerSgdPlan plan_powersgd(const BucketLayout& layout,
                           const std::vector<std::vector<int64_t>>& shapes, int64_t rank,
                           torch::Device device, Range kept) {
  PowerSgdPlan plan;
  plan.layout = layout;
  plan.kept = kept;
  std::vector<Span> exact;
  int64_t chunk = std::gcd(layout.numel, std::gcd(kept.offset, kept.numel));
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const int64_t param = layout.params[i];
    const int64_t offset = layout.offsets[i];
    const std::vector<int64_t>& shape = shapes.at(param);
    int64_t numel = 1;
    for (const int64_t size : shape) numel *= size;
    const int64_t rows = shape.empty() ? 1 : shape[0];
    const int64_t cols = rows == 0 ? 0 : numel / rows;
    const int64_t r = std::min({rank, rows, cols});
    if (!compressed_at(shape, rank)) {
      chunk = std::gcd(chunk, std::gcd(offset, numel));
      exact.push_back({offset, numel});
      plan.exact_numel += numel;
      continue;
    }
    // A group of this shape that this matrix continues evenly (any second one does).
    auto continues = [&](const PowerSgdGroup& group) {
      if (group.rows != rows || group.cols != cols || group.rank != r) return false;
      const int64_t last = group.offset + (group.size() - 1) * group.stride;
      return group.size() == 1 ? offset - last >= numel : offset - last == group.stride;
    };
    auto group = std::find_if(plan.groups.begin(), plan.groups.end(), continues);
    if (group == plan.groups.end()) {
      plan.groups.push_back({rows, cols, r, {}, offset, numel});
      group = plan.groups.end() - 1;
    }
    if (group->size() == 1) group->stride = offset - group->offset;
    group->params.push_back(param);
  }
  plan.chunk = std::max<int64_t>(chunk, 1);  // 0 for an empty bucket
  const std::vector<int64_t> rows = chunk_rows(exact, plan.chunk);
  DTRAIN_CHECK(std::is_sorted(rows.begin(), rows.end()),
               "powersgd: a bucket's parameters are not in ascending offsets");
  plan.exact_chunks = torch::tensor(rows, torch::kInt64).to(device);
  keep_exact_rows(plan, rows, device);

  for (PowerSgdGroup& group : plan.groups) {
    group.first = plan.num_matrices;
    group.p_offset = plan.exact_numel + plan.p_numel;
    group.q_offset = plan.q_numel;
    plan.num_matrices += group.size();
    plan.p_numel += group.size() * group.rows * group.rank;
    plan.q_numel += group.size() * group.cols * group.rank;
    plan.max_rows = std::max(plan.max_rows, group.rows);
    plan.max_rank = std::max(plan.max_rank, group.rank);
  }
  std::vector<int64_t> padded;  // P[b][i][j] -> P^T[first + b][j][i]
  for (const PowerSgdGroup& group : plan.groups) {
    for (int64_t b = group.first; b < group.first + group.size(); ++b) {
      for (int64_t i = 0; i < group.rows; ++i) {
        for (int64_t j = 0; j < group.rank; ++j) {
          padded.push_back((b * plan.max_rank + j) * plan.max_rows + i);
        }
      }
    }
  }
  plan.padded_index = torch::tensor(padded, torch::kInt64).to(device);
  return plan;
}

}  // namespace dtrain::dist::compression
