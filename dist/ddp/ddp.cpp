#include "dist/ddp/ddp.h"

#include "dist/optimizer_state.h"

#include <numeric>

namespace dtrain::dist {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

BufferPolicy buffer_policy(const std::string& name) {
  if (name == "average") return BufferPolicy::kAverage;
  if (name == "local") return BufferPolicy::kLocal;
  return BufferPolicy::kBroadcast;
}

}  // namespace

DdpStrategy::DdpStrategy(DdpOptions options, std::shared_ptr<Communicator> comm)
    : ReplicatedStrategy(std::move(comm)),
      options_(std::move(options)) {}

Layout DdpStrategy::plan_layout(const std::vector<int64_t>& order) const {
  return packed_layout(plan_buckets(order, params_,
                                    static_cast<int64_t>(options_.first_bucket_mb * kMiB),
                                    static_cast<int64_t>(options_.bucket_mb * kMiB)),
                       params_);
}

void DdpStrategy::attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) {
  hold(model);
  buffer_sync_ = std::make_unique<BufferSync>(buffers_, comm_, buffer_policy(options_.buffers));
  build_optimizer(params_, make_optimizer);

  // Backward produces gradients roughly in reverse order of registration: the first guess.
  std::vector<int64_t> order(params_.size());
  std::iota(order.rbegin(), order.rend(), 0);
  ReducerOptions reducer;
  reducer.owner = "ddp";
  reducer.overlap = options_.overlap;
  reducer.find_unused = options_.find_unused;
  reducer.unused_hint = "or set dist.ddp.find_unused = true to reduce them as zeros";
  reducer_ = std::make_unique<GradientReducer>(
      params_, names_, comm_, static_cast<CommHook&>(*this), reducer, plan_layout(order),
      [this](const std::vector<int64_t>& observed) { return plan_layout(observed); });
}

std::unique_ptr<Work> DdpStrategy::launch(Bucket& bucket) {
  return comm_->all_reduce(bucket.flat, ReduceOp::kAverage);
}

void DdpStrategy::step(double lr) {
  optimizer_step(lr);
  end_step_record();
}

void DdpStrategy::save(const std::string& dir) const { save_optimizer(*optimizer_, dir); }

void DdpStrategy::load(const std::string& dir) {
  load_optimizer_state(dir, params_, 0, static_cast<int64_t>(params_.size()), make_optimizer_,
                       *optimizer_);
}

}  // namespace dtrain::dist
