// The `zero` strategy at dist.zero.stage = 1, ZeRO stage 1 (Rajbhandari et al. 2020, "P_os"): every rank holds the
// whole model and computes gradients on its own micro-batch, as in DDP, but keeps optimizer
// state only for the parameters it owns (dist/zero/partition.h), so the state's memory is
// divided by the number of ranks. A step:
//   1. the gradient reducer (dist/reducer.h) holds the gradients in one flat bucket laid out
//      by owner; when the last gradient arrives it is reduce-scattered (average), leaving each
//      rank the averaged gradients of its own parameters;
//   2. each rank's optimizer updates its own parameters, which live as views in a flat
//      parameter buffer of the same layout;
//   3. one all-gather of that buffer gives every rank every updated parameter.
// The traffic is that of DDP's all-reduce (a reduce-scatter plus an all-gather). One bucket:
// the reduce-scatter starts when backward ends, not during it (stage 2, dist/zero/zero2.h,
// reduce-scatters bucket by bucket during backward). BatchNorm buffers are
// broadcast from rank 0 before every forward and evaluation (DDP's default policy).
// Parameters without a gradient in a step count as zero gradients. Checkpoints: each rank writes
// the optimizer state of its own parameters (dist/optimizer_state.h, by tensor).
// Memory: the collectives move equal blocks, so the flat buffers of parameters and gradients
// hold N blocks of the largest share, at least the largest tensor: N x that can exceed the
// model (SimpleCNN on 3 ranks: 1.72x; the gradients, with this rank's averaged share on top,
// 2.29x) and so DDP's memory, which the start-up warns of. Stage 2 splits tensors instead.
#pragma once

#include "dist/comm/communicator.h"
#include "dist/reducer.h"
#include "dist/replicated.h"
#include "dist/zero/partition.h"

#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

// The start-up warning where N equal blocks of the largest share (`shard_numel` elements, on
// `ranks` ranks) pass 1.25x the `total` elements of the model: the flat parameters' and the
// gradients' (flat bucket plus averaged share) multiple of DDP's memory; "" below that.
std::string stage1_padding_warning(int64_t ranks, int64_t total, int64_t shard_numel);

class ZeroStrategy : public ReplicatedStrategy, private CommHook {
 public:
  // dist.zero's options are validated by the config; dist/factory.cpp picks the stage.
  explicit ZeroStrategy(std::shared_ptr<Communicator> comm);

  std::string name() const override { return "zero"; }
  void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) override;
  // This rank's parameters: only their gradients are reduced here.
  std::vector<torch::Tensor> gradient_owners() override { return owned_; }
  void step(double lr) override;
  // Each rank writes its optimizer; rank 0 where each rank's parameters begin.
  void save_partition(const std::string& dir) const override;
  void save(const std::string& dir) const override;
  void load(const std::string& dir) override;

  const ZeroPartition& partition() const { return partition_; }

 protected:
  // The flat buffers: parameters and the one gradient bucket whole, plus this rank's shard.
  MemoryBytes memory() const override;

 private:
  // CommHook: the one bucket is reduce-scattered into this rank's shard of averaged
  // gradients, which its parameters then take as views.
  std::unique_ptr<Work> launch(Bucket& bucket) override;
  void finish(Bucket& bucket) override;
  Collective collective() const override { return Collective::kReduceScatter; }
  // The start-up line of the partition, and a warning where its padding outweighs DDP's
  // memory.
  void describe_partition(const std::vector<int64_t>& numels) const;

  std::vector<torch::Tensor> owned_;
  ZeroPartition partition_;
  torch::Tensor flat_params_;  // [ranks * shard_numel]; every parameter is a view into it
  torch::Tensor shard_grads_;  // [shard_numel]: this rank's averaged gradients
};

}  // namespace dtrain::dist
