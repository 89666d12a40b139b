#include "dist/compression/powersgd.h"

#include "dist/compression/chained_work.h"

#include <algorithm>

namespace dtrain::dist::compression {

namespace {

std::vector<int64_t> numels_of(const std::vector<torch::Tensor>& params) {
  std::vector<int64_t> numels;
  for (const torch::Tensor& param : params) numels.push_back(param.numel());
  return numels;
}

}  // namespace

PowerSgdCodec::PowerSgdCodec(const CompressionOptions& options, std::shared_ptr<Communicator> comm,
                             const std::vector<torch::Tensor>& params)
    : Codec(options.error_feedback ? std::vector<std::string>{"residual"}
                                   : std::vector<std::string>{},
            numels_of(params)),
      comm_(std::move(comm)),
      rank_(options.rank),
      error_feedback_(options.error_feedback) {
  for (const torch::Tensor& param : params) shapes_.push_back(param.sizes().vec());
}

const PowerSgdCodec::Plan& PowerSgdCodec::plan_for(const Bucket& bucket) {
  if (static_cast<int64_t>(plans_.size()) <= bucket.index) plans_.resize(bucket.index + 1);
  Plan& plan = plans_[bucket.index];
  if (plan.layout == bucket.layout) return plan;  // a plan not made yet has no parameters
  plan = Plan{bucket.layout, {}, {}, 0};
  for (size_t i = 0; i < bucket.layout.params.size(); ++i) {
    const int64_t param = bucket.layout.params[i];
    const int64_t offset = bucket.layout.offsets[i];
    const std::vector<int64_t>& shape = shapes_.at(param);
    int64_t numel = 1;
    for (const int64_t size : shape) numel *= size;
    const int64_t rows = shape.empty() ? 1 : shape[0];
    const int64_t cols = rows == 0 ? 0 : numel / rows;
    const int64_t rank = std::min({rank_, rows, cols});
    if (shape.size() >= 2 && (rows + cols) * rank < rows * cols) {
      plan.matrices.push_back({param, offset, rows, cols, rank});
    } else {
      plan.exact.emplace_back(offset, numel);
      plan.exact_numel += numel;
    }
  }
  return plan;
}

torch::Tensor& PowerSgdCodec::warm_q(const Matrix& matrix, const torch::Tensor& like) {
  torch::Tensor& q = q_[matrix.param];
  // A checkpoint of another rank has Qs of another shape: they start again.
  if (!q.defined() || q.size(0) != matrix.cols || q.size(1) != matrix.rank) {
    // The same start on every rank: seeded by the parameter, drawn on the CPU.
    auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(matrix.param) + 1);
    q = at::randn({matrix.cols, matrix.rank}, generator, torch::kFloat64)
            .to(like.device(), like.scalar_type());
  }
  return q;
}

std::unique_ptr<Work> PowerSgdCodec::launch(Bucket& bucket, int64_t step) {
  (void)step;
  const Plan& plan = plan_for(bucket);
  torch::Tensor& flat = bucket.flat;
  if (error_feedback_) flat.add_(state_.at(bucket, 0));
  int64_t first_numel = plan.exact_numel, second_numel = 0;
  for (const Matrix& matrix : plan.matrices) {
    first_numel += matrix.rows * matrix.rank;
    second_numel += matrix.cols * matrix.rank;
  }
  if (static_cast<int64_t>(in_flight_.size()) <= bucket.index) in_flight_.resize(bucket.index + 1);
  InFlight& flight = in_flight_[bucket.index];
  flight.first = torch::empty({first_numel}, flat.options());
  flight.second = torch::empty({second_numel}, flat.options());
  int64_t at = 0;
  for (const auto& [offset, numel] : plan.exact) {
    flight.first.narrow(0, at, numel).copy_(flat.narrow(0, offset, numel));
    at += numel;
  }
  for (const Matrix& matrix : plan.matrices) {
    const torch::Tensor m = flat.narrow(0, matrix.offset, matrix.rows * matrix.cols)
                                .view({matrix.rows, matrix.cols});
    torch::Tensor p = flight.first.narrow(0, at, matrix.rows * matrix.rank)
                          .view({matrix.rows, matrix.rank});
    torch::mm_out(p, m, warm_q(matrix, flat));
    at += matrix.rows * matrix.rank;
  }
  std::unique_ptr<Work> first = comm_->all_reduce(flight.first, ReduceOp::kAverage);
  return std::make_unique<ChainedWork>(
      std::move(first), [this, &bucket]() { return second_round(bucket); });
}

std::unique_ptr<Work> PowerSgdCodec::second_round(Bucket& bucket) {
  const Plan& plan = plans_.at(bucket.index);
  InFlight& flight = in_flight_.at(bucket.index);
  const torch::Tensor& flat = bucket.flat;
  torch::Tensor* residual = error_feedback_ ? &state_.at(bucket, 0) : nullptr;
  int64_t at_p = plan.exact_numel, at_q = 0;
  for (const Matrix& matrix : plan.matrices) {
    torch::Tensor p = flight.first.narrow(0, at_p, matrix.rows * matrix.rank)
                          .view({matrix.rows, matrix.rank});
    p.copy_(std::get<0>(at::linalg_qr(p)));
    const torch::Tensor m = flat.narrow(0, matrix.offset, matrix.rows * matrix.cols)
                                .view({matrix.rows, matrix.cols});
    torch::Tensor q = flight.second.narrow(0, at_q, matrix.cols * matrix.rank)
                          .view({matrix.cols, matrix.rank});
    torch::mm_out(q, m.t(), p);
    if (residual) {
      // What this rank's factors do not carry: M - P Q_i^T.
      torch::Tensor r = residual->narrow(0, matrix.offset, matrix.rows * matrix.cols)
                            .view({matrix.rows, matrix.cols});
      torch::sub_out(r, m, torch::mm(p, q.t()));
    }
    at_p += matrix.rows * matrix.rank;
    at_q += matrix.cols * matrix.rank;
  }
  return comm_->all_reduce(flight.second, ReduceOp::kAverage);
}

void PowerSgdCodec::finish(Bucket& bucket) {
  const Plan& plan = plans_.at(bucket.index);
  InFlight& flight = in_flight_.at(bucket.index);
  torch::Tensor& flat = bucket.flat;
  int64_t at_p = 0, at_q = 0;
  for (const auto& [offset, numel] : plan.exact) {
    flat.narrow(0, offset, numel).copy_(flight.first.narrow(0, at_p, numel));
    at_p += numel;
  }
  for (const Matrix& matrix : plan.matrices) {
    const torch::Tensor p = flight.first.narrow(0, at_p, matrix.rows * matrix.rank)
                                .view({matrix.rows, matrix.rank});
    const torch::Tensor q = flight.second.narrow(0, at_q, matrix.cols * matrix.rank)
                                .view({matrix.cols, matrix.rank});
    torch::Tensor m = flat.narrow(0, matrix.offset, matrix.rows * matrix.cols)
                          .view({matrix.rows, matrix.cols});
    torch::mm_out(m, p, q.t());
    q_[matrix.param].copy_(q);  // the next step's warm start
    at_p += matrix.rows * matrix.rank;
    at_q += matrix.cols * matrix.rank;
  }
}

int64_t PowerSgdCodec::payload_bytes(const Bucket& bucket) const {
  const InFlight& flight = in_flight_.at(bucket.index);
  return flight.first.nbytes() + flight.second.nbytes();
}

int64_t PowerSgdCodec::state_bytes() const {
  int64_t total = Codec::state_bytes();
  for (const auto& item : q_) total += item.second.nbytes();
  return total;
}

CodecState PowerSgdCodec::state() const {
  CodecState state = Codec::state();
  state.shared = q_;
  return state;
}

void PowerSgdCodec::set_state(CodecState state) {
  q_ = std::move(state.shared);
  Codec::set_state(std::move(state));
}

}  // namespace dtrain::dist::compression
