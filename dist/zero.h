// The `zero` strategy, ZeRO stage 1 (Rajbhandari et al. 2020, "P_os"): every rank holds the
// whole model and computes gradients on its own micro-batch, as in DDP, but keeps optimizer
// state only for the parameters it owns (dist/zero_partition.h), so the state's memory is
// divided by the number of ranks. A step:
//   - after the last micro-step's backward, the gradients are copied into one flat buffer laid
//     out by owner, and one reduce-scatter (average) leaves each rank the averaged gradients of
//     its own parameters;
//   - each rank's optimizer updates its own parameters, which live as views in a flat
//     parameter buffer;
//   - one all-gather of that buffer gives every rank every updated parameter.
// The traffic is that of DDP's all-reduce (a reduce-scatter plus an all-gather). This version
// does not overlap it with backward. BatchNorm buffers are broadcast from rank 0 before every
// forward and evaluation (DDP's default policy). Parameters without a gradient in a step count
// as zero gradients.
#pragma once

#include "dist/comm/communicator.h"
#include "dist/strategy.h"
#include "dist/zero_partition.h"

#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

class ZeroStrategy : public Strategy {
 public:
  // dist.zero's options are validated by the config; stage 1 is the only one.
  explicit ZeroStrategy(std::shared_ptr<Communicator> comm);

  std::string name() const override { return "zero"; }
  void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) override;
  void before_forward(int64_t step) override;
  void after_backward(bool last_micro_step) override;
  void before_eval() override;
  // This rank's parameters: only their gradients are reduced here.
  std::vector<torch::Tensor> gradient_owners() override { return owned_; }
  void step(double lr) override;
  void prepare_checkpoint() override;
  void save(const std::string& dir) const override;
  void load(const std::string& dir) override;
  int64_t optimizer_state_bytes() const override;
  std::optional<StepStats> stats() const override;

  const ZeroPartition& partition() const { return partition_; }

 private:
  void sync_buffers();

  std::shared_ptr<Communicator> comm_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_, owned_, buffers_;
  ZeroPartition partition_;
  torch::Tensor flat_params_;  // [ranks * shard_numel]; every parameter is a view into it
  torch::Tensor flat_grads_;   // the same layout, filled after backward
  torch::Tensor shard_grads_;  // [shard_numel]: this rank's averaged gradients
  OptimizerFactory make_optimizer_;  // load() rebuilds the writers' optimizers with it
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  // On rank 0: every rank's serialized optimizer state, gathered by prepare_checkpoint().
  std::vector<std::string> gathered_state_;
  struct StepRecord {
    std::vector<std::unique_ptr<Work>> works;  // reduce-scatter, all-gather (waited)
    std::vector<std::unique_ptr<Work>> buffer_works;  // BatchNorm buffer broadcasts
    int64_t bytes = 0;
  };
  StepRecord current_, last_;
};

}  // namespace dtrain::dist
