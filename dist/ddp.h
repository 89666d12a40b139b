// The `ddp` strategy: data parallelism in the manner of PyTorch DDP. Every rank holds the whole
// model and optimizer; after backward the gradients are averaged over ranks, so every rank
// takes the same step. How:
//   - attach(): rank 0's parameters and buffers are broadcast; gradients are laid out as views
//     into flat buckets (`dist.ddp.bucket_mb`, the first one small), in reverse order of
//     registration, re-planned once from the order observed in the first step (rank 0's
//     order, so every rank agrees).
//   - A hook on each parameter's gradient accumulator counts the bucket down; a bucket whose
//     last gradient arrived gets the gradients autograd produced copied in (step() released
//     the previous ones; the views become the gradients) and starts its all-reduce (average)
//     at once, in bucket order on every rank, overlapping the rest of backward
//     (`dist.ddp.overlap`).
//   - Gradient accumulation reduces only on the last micro-step.
//   - BatchNorm buffers follow `dist.ddp.buffers`; they are moved into one flat tensor per
//     dtype at attach(), so each sync is one collective without copies.
#pragma once

#include "dist/buckets.h"
#include "dist/comm/communicator.h"
#include "dist/options.h"
#include "dist/strategy.h"

#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

class DdpStrategy : public Strategy {
 public:
  DdpStrategy(DdpOptions options, std::shared_ptr<Communicator> comm);
  ~DdpStrategy() override;

  std::string name() const override { return "ddp"; }
  void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) override;
  void before_forward(int64_t step) override;
  void before_backward(bool last_micro_step) override;
  void after_backward(bool last_micro_step) override;
  void before_eval() override;
  std::vector<torch::Tensor> gradient_owners() override { return params_; }
  void step(double lr) override;
  void save(const std::string& dir) const override;
  void load(const std::string& dir) override;
  int64_t optimizer_state_bytes() const override;
  std::optional<StepStats> stats() const override;

  // The current bucket plan (indices into model.parameters()), in launch order.
  const BucketPlan& buckets() const { return plan_; }

 private:
  struct Bucket {
    std::vector<int64_t> params;
    torch::Tensor flat;  // the parameters' gradients live here, as views
    int64_t pending = 0;
    std::unique_ptr<Work> work;
  };
  // Timings of the last completed step, for stats().
  struct StepRecord {
    std::shared_ptr<const TimePoint> backward_end;
    std::vector<std::shared_ptr<const TimePoint>> starts, ends;  // buckets, in launch order
    // Buffer syncs. Timings are read only in stats(): reading them waits for the device.
    std::vector<std::shared_ptr<const TimePoint>> buffer_starts, buffer_ends;
    int64_t bytes = 0;
  };

  void build_buckets(const BucketPlan& plan);
  void flatten_buffers();
  void register_hooks();
  void on_gradient_ready(int64_t index);
  // Makes the bucket's views the gradients, copying those autograd allocated.
  void move_gradients_to_bucket(const Bucket& bucket);
  void launch_ready_buckets();
  void sync_buffers();
  void replan_from_observed_order();

  DdpOptions options_;
  std::shared_ptr<Communicator> comm_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> buffers_;
  // The buffers live in one flat tensor per dtype, so a sync is one collective each, no copies.
  std::vector<torch::Tensor> flat_buffers_;
  bool poll_in_hooks_ = false;  // MPI progresses a collective only inside MPI calls
  OptimizerFactory make_optimizer_;  // load() rebuilds a sharded writer's optimizers with it
  std::unique_ptr<torch::optim::Optimizer> optimizer_;

  BucketPlan plan_;
  std::vector<Bucket> buckets_;
  std::vector<int64_t> bucket_of_;  // parameter index -> bucket
  std::vector<torch::Tensor> views_;  // parameter index -> its gradient's place in the bucket
  std::vector<bool> ready_;         // parameter's gradient arrived this step
  size_t next_bucket_ = 0;          // buckets launch strictly in order, on every rank alike
  bool reducing_ = false;           // this backward is a step's last micro-step

  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
  std::vector<int64_t> observed_order_;  // first step's gradient order
  bool order_replanned_ = false;

  StepRecord current_, last_;
};

}  // namespace dtrain::dist
