#include "dist/compression/powersgd.h"

#include "dist/compression/chained_work.h"
#include "dist/compression/gram_schmidt.h"

#include "common/log.h"

#include <algorithm>

namespace dtrain::dist::compression {

namespace {

std::vector<int64_t> numels_of(const std::vector<torch::Tensor>& params) {
  std::vector<int64_t> numels;
  for (const torch::Tensor& param : params) numels.push_back(param.numel());
  return numels;
}

// A group's part of a payload or buffer, [size, rows, cols].
torch::Tensor stacked(const torch::Tensor& buffer, int64_t offset, const PowerSgdGroup& group,
                      int64_t rows, int64_t cols) {
  return buffer.narrow(0, offset, group.size() * rows * cols).view({group.size(), rows, cols});
}

torch::Tensor p_of(const torch::Tensor& first, const PowerSgdGroup& group) {
  return stacked(first, group.p_offset, group, group.rows, group.rank);
}

torch::Tensor q_of(const torch::Tensor& second, const PowerSgdGroup& group) {
  return stacked(second, group.q_offset, group, group.cols, group.rank);
}

// The group's matrices in a bucket-sized tensor (the gradients, the residual), in place.
torch::Tensor m_of(const torch::Tensor& flat, const PowerSgdGroup& group) {
  const int64_t span = (group.size() - 1) * group.stride + group.rows * group.cols;
  return flat.narrow(0, group.offset, span)
      .as_strided({group.size(), group.rows, group.cols}, {group.stride, group.cols, 1});
}

// A flat tensor seen as rows of the plan's chunk, the unit of its indices.
torch::Tensor chunks_of(const torch::Tensor& flat, const PowerSgdPlan& plan) {
  return flat.view({-1, plan.chunk});
}

// Writes the elements of the group's products P Q^T [size, rows, cols] that lie in `range`
// of the bucket into `kept` [range.numel]: the matrices wholly inside (consecutive, being
// evenly spaced) in one batched product, those the range cuts only for their rows in it.
void decode_range(const torch::Tensor& p, const torch::Tensor& q, const PowerSgdGroup& group,
                  Range range, const torch::Tensor& kept) {
  const int64_t numel = group.rows * group.cols;
  const auto start = [&](int64_t i) { return group.offset + i * group.stride; };
  int64_t first = 0;
  while (first < group.size() && start(first) < range.offset) ++first;
  int64_t last = first;
  while (last < group.size() && start(last) + numel <= range.end()) ++last;
  if (last > first) {
    const int64_t count = last - first;
    torch::Tensor m = kept.narrow(0, start(first) - range.offset,
                                  (count - 1) * group.stride + numel)
                          .as_strided({count, group.rows, group.cols},
                                      {group.stride, group.cols, 1});
    torch::bmm_out(m, p.narrow(0, first, count), q.narrow(0, first, count).transpose(1, 2));
  }
  for (int64_t i = 0; i < group.size(); ++i) {
    const int64_t lo = std::max(start(i), range.offset);
    const int64_t hi = std::min(start(i) + numel, range.end());
    if ((i >= first && i < last) || lo >= hi) continue;
    const int64_t row = (lo - start(i)) / group.cols;
    const int64_t rows = (hi - start(i) + group.cols - 1) / group.cols - row;
    const torch::Tensor product = p[i].narrow(0, row, rows).mm(q[i].t()).view({-1});
    kept.narrow(0, lo - range.offset, hi - lo)
        .copy_(product.narrow(0, lo - start(i) - row * group.cols, hi - lo));
  }
}

}  // namespace

PowerSgdCodec::PowerSgdCodec(const CompressionOptions& options, std::shared_ptr<Communicator> comm,
                             Share share, const std::vector<torch::Tensor>& params)
    : Codec(std::move(comm), share,
            options.error_feedback ? std::vector<std::string>{"residual"}
                                   : std::vector<std::string>{},
            numels_of(params)),
      rank_(options.rank),
      error_feedback_(options.error_feedback) {
  for (const torch::Tensor& param : params) shapes_.push_back(param.sizes().vec());
  if (comm_->rank() == 0 && !params.empty() && !any_compressed(shapes_, rank_)) {
    log::warn("dist.compression.rank {} compresses none of the model's {}: each is "
              "all-reduced as it is, as without a codec; use a rank r with (n + m) r < n m "
              "for some weight [n, m], or kind = \"none\"",
              rank_, log::counted(static_cast<int64_t>(params.size()), "tensor"));
  }
}

PowerSgdCodec::Entry& PowerSgdCodec::entry_for(const Bucket& bucket) {
  const auto index = static_cast<size_t>(bucket.index);
  if (entries_.size() <= index) entries_.resize(index + 1);
  Entry& entry = entries_[index];
  if (entry.planned && entry.plan.layout == bucket.layout) return entry;
  // First use, or the reducer re-planned: the buffers are made again, the Qs taken from q_.
  entry = Entry{};
  entry.planned = true;
  entry.plan = plan_powersgd(bucket.layout, shapes_, rank_, bucket.flat.device(), kept(bucket));
  if (!entry.compresses()) {
    entry.plan.exact_chunks = entry.plan.kept_exact_chunks = entry.plan.padded_index =
        torch::Tensor();
    return entry;
  }
  const PowerSgdPlan& plan = entry.plan;
  const torch::TensorOptions options = bucket.flat.options();
  entry.first = torch::empty({plan.exact_numel + plan.p_numel}, options);
  entry.second = torch::empty({plan.q_numel}, options);
  entry.previous = torch::empty({plan.q_numel}, options);
  entry.padded = torch::zeros({plan.num_matrices, plan.max_rank, plan.max_rows}, options);
  load_q(entry);
  return entry;
}

void PowerSgdCodec::load_q(Entry& entry) {
  for (const PowerSgdGroup& group : entry.plan.groups) {
    const torch::Tensor qs = q_of(entry.second, group);
    for (int64_t i = 0; i < group.size(); ++i) {
      const int64_t param = group.params[i];
      torch::Tensor& q = q_[param];
      // A checkpoint of another rank has Qs of another shape: they start again.
      if (q.defined() && q.size(0) == group.cols && q.size(1) == group.rank) {
        qs[i].copy_(q);
      } else {
        // The same start on every rank: seeded by the parameter, drawn on the CPU.
        auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(param) + 1);
        qs[i].copy_(at::randn({group.cols, group.rank}, generator, torch::kFloat64));
      }
      q = qs[i];
    }
  }
}

std::unique_ptr<Work> PowerSgdCodec::launch(Bucket& bucket, int64_t step) {
  (void)step;
  Entry& entry = entry_for(bucket);
  const PowerSgdPlan& plan = entry.plan;
  torch::Tensor& flat = bucket.flat;
  if (!entry.compresses()) return comm_->all_reduce(flat, ReduceOp::kAverage);
  if (error_feedback_) flat.add_(state_.at(bucket, 0));
  torch::Tensor exact = chunks_of(entry.first.narrow(0, 0, plan.exact_numel), plan);
  torch::index_select_out(exact, chunks_of(flat, plan), 0, plan.exact_chunks);
  for (const PowerSgdGroup& group : plan.groups) {
    torch::Tensor p = p_of(entry.first, group);
    torch::bmm_out(p, m_of(flat, group), q_of(entry.second, group));
  }
  std::unique_ptr<Work> first = comm_->all_reduce(entry.first, ReduceOp::kAverage);
  return std::make_unique<ChainedWork>(
      std::move(first), [this, &bucket]() { return second_round(bucket); });
}

std::unique_ptr<Work> PowerSgdCodec::second_round(Bucket& bucket) {
  Entry& entry = entries_.at(bucket.index);
  const PowerSgdPlan& plan = entry.plan;
  // Every P of the bucket orthonormalised in one batch, zero-padded to the largest.
  torch::Tensor ps = entry.first.narrow(0, plan.exact_numel, plan.p_numel);
  entry.padded.zero_();
  entry.padded.view({-1}).index_copy_(0, plan.padded_index, ps);
  orthonormalize_rows_(entry.padded);
  torch::index_select_out(ps, entry.padded.view({-1}), 0, plan.padded_index);
  entry.previous.copy_(entry.second);
  for (const PowerSgdGroup& group : plan.groups) {
    const torch::Tensor p = p_of(entry.first, group);
    torch::Tensor q = q_of(entry.second, group);
    const torch::Tensor m = m_of(bucket.flat, group);
    torch::bmm_out(q, m.transpose(1, 2), p);
    if (error_feedback_) {
      // What this rank's factors do not carry: M - P Q_i^T.
      torch::Tensor residual = m_of(state_.at(bucket, 0), group);
      torch::baddbmm_out(residual, m, p, q.transpose(1, 2), 1.0, -1.0);
    }
  }
  return comm_->all_reduce(entry.second, ReduceOp::kAverage);
}

void PowerSgdCodec::finish(Bucket& bucket, torch::Tensor kept) {
  Entry& entry = entries_.at(bucket.index);
  const PowerSgdPlan& plan = entry.plan;
  if (!entry.compresses()) {
    if (!kept.is_same(bucket.flat)) {
      kept.copy_(bucket.flat.narrow(0, plan.kept.offset, plan.kept.numel));
    }
    return;
  }
  const int64_t exact = plan.kept_exact_chunks.numel() * plan.chunk;
  chunks_of(kept, plan).index_copy_(
      0, plan.kept_exact_chunks,
      chunks_of(entry.first.narrow(0, plan.kept_exact_first * plan.chunk, exact), plan));
  for (const PowerSgdGroup& group : plan.groups) {
    decode_range(p_of(entry.first, group), q_of(entry.second, group), group, plan.kept, kept);
  }
  // entry.second keeps the averaged Qs: the next step's warm start. Non-finite ones (the same
  // on every rank, being averaged) come of a non-finite gradient, a step that is skipped or
  // stops the run: the previous Qs stay, chosen on the device (no host sync).
  const torch::Tensor finite = torch::isfinite(entry.second).all();
  torch::where_out(entry.previous, finite, entry.second, entry.previous);
  entry.second.copy_(entry.previous);
}

int64_t PowerSgdCodec::payload_bytes(const Bucket& bucket) const {
  const Entry& entry = entries_.at(bucket.index);
  if (!entry.compresses()) return static_cast<int64_t>(bucket.flat.nbytes());
  return entry.first.nbytes() + entry.second.nbytes();
}

int64_t PowerSgdCodec::state_bytes() const {
  int64_t total = Codec::state_bytes();
  for (const auto& item : q_) total += item.second.nbytes();
  // And what each bucket keeps between steps besides its Qs (counted above).
  for (const Entry& entry : entries_) {
    if (!entry.first.defined()) continue;
    total += entry.first.nbytes() + entry.previous.nbytes() + entry.padded.nbytes() +
             entry.plan.exact_chunks.nbytes() + entry.plan.kept_exact_chunks.nbytes() +
             entry.plan.padded_index.nbytes();
  }
  return total;
}

CodecState PowerSgdCodec::state() const {
  CodecState state = Codec::state();
  for (const auto& [param, q] : q_) state.shared[param] = q.clone();
  return state;
}

void PowerSgdCodec::set_state(CodecState state) {
  q_ = std::move(state.shared);
  entries_.clear();  // each bucket takes its Qs from q_ at its next launch
  Codec::set_state(std::move(state));
}

}  // namespace dtrain::dist::compression
