// The `zero` strategy at dist.zero.stage = 3, ZeRO stage 3 (Rajbhandari et al. 2020,
// "P_os+g+p"): every rank keeps only its shard of the parameters, of the gradients and of
// the optimizer state, and holds a unit of the model (common/units.h: stem, blocks, head)
// whole only while it runs. The plan is stage 2's (dist/zero/bucket_shards.h) with the
// model's units for buckets: each unit's trainable parameters are one flat buffer, padded to
// a multiple of the number of ranks and cut into equal shards, shard r on rank r. A step:
//   1. forward: each unit is all-gathered before it runs and freed after, the next
//      dist.zero.prefetch units gathered ahead (dist/zero/unit_shards.h);
//   2. backward: each unit is gathered again before its backward (but the last, kept whole
//      from its forward); after it, its gradients are reduce-scattered (average) into this
//      rank's gradient shard and the unit is freed;
//   3. this rank's optimizer steps its shard (dist/ps/shard.h: LARS's and LAMB's per-tensor
//      norms and LAMB's clipping norm are summed over the ranks, so they are those of the
//      unsharded run). Nothing is gathered after the step: the next forward does it.
// Traffic per micro-step: two all-gathers (less the last unit's second) and one
// reduce-scatter of the padded model, at most 1.5x DDP's.
//
// Memory held by a rank for the whole run (the `memory/*` stats): its shard of the parameters,
// of the gradients and of the optimizer state. On top, while a step runs: at most
// dist.zero.prefetch + 1 whole units (the `memory/max_whole_units` stat counts them), the
// full-size gradients of the unit in backward and of at most two units on the wire, and
// autograd's activations. The model is built whole before attach(), which then
// frees its parameters' memory: read them through model_state(), while the strategy lives or
// after.
//
// Gradient accumulation: reduce-scattered every micro-step and summed in the shard (see
// dist/zero/unit_shards.h). Evaluation (no grad mode) gathers and frees each unit around its
// forward alone. Checkpoints: each rank writes the optimizer state of its own pieces
// (dist/zero/shard_checkpoint.h), read back by every strategy on any number of ranks; the
// parameters go into the consolidated model.pt through model_state(), which gathers them whole
// on every rank, the model's size once (the optimizer state, twice that under Adam, is never
// gathered). BatchNorm buffers stay whole, broadcast from rank 0 before every forward and
// evaluation; parameters without a gradient in a step count as zero gradients.
//
// Runs on CPU ranks (MPI) and on GPUs (NCCL), where no hook blocks the host
// (dist/zero/unit_shards.h). With dist.zero.gather_dtype = "compute", under autocast each unit
// is gathered in the dtype its forward computes in and widened into the parameters: half an
// fp32 gather's bytes; the parameters' shards, the optimizer's, stay in their dtype.
#pragma once

#include "common/units.h"
#include "dist/comm/communicator.h"
#include "dist/options.h"
#include "dist/ps/plan.h"
#include "dist/ps/shard.h"
#include "dist/replicated.h"
#include "dist/zero/unit_shards.h"

#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

// The indices in `params` (a model's trainable parameters, named `names`) of each unit's, in
// unit order; a parameter not in `params` (frozen) stays whole. Throws UserError naming a
// parameter of no unit, which nothing would gather.
std::vector<std::vector<int64_t>> parameters_by_unit(UnitModule& model,
                                                     const std::vector<torch::Tensor>& params,
                                                     const std::vector<std::string>& names);

// Rank 0's start-up line: `units` units, each cut into `ranks` shards, `shard_bytes` of the
// `total_bytes` of parameters held by each rank, and the most units whole at once:
// min(prefetch + 1, units), as dist.zero.prefetch cannot gather units the model lacks.
std::string stage3_plan_line(int64_t units, int64_t ranks, int64_t shard_bytes,
                             int64_t total_bytes, int64_t prefetch);

class Zero3Strategy : public ReplicatedStrategy {
 public:
  Zero3Strategy(ZeroOptions options, std::shared_ptr<Communicator> comm);
  ~Zero3Strategy() override;

  std::string name() const override { return "zero"; }
  // `model` must be a dtrain::UnitModule whose units own every trainable parameter.
  void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) override;
  void before_forward(int64_t step) override;
  void after_backward(bool last_micro_step) override;
  void before_eval() override;
  bool forward_communicates() const override { return true; }
  // This rank's pieces of the parameters: their gradients are its shard of the averaged ones.
  std::vector<torch::Tensor> gradient_owners() override { return shard_->pieces(); }
  void step(double lr) override;
  // Gathers the parameters into new whole tensors; buffers are the model's own. Collective.
  NamedTensors model_state() override;
  void load_model_state(const NamedTensors& state) override;
  void save_partition(const std::string& dir) const override;
  void save(const std::string& dir) const override;
  void load(const std::string& dir) override;
  Stats stats() const override;

  const PsPlan& plan() const { return plan_; }
  // The most units whole at once since attach(); at most min(dist.zero.prefetch + 1, units).
  int64_t max_whole_units() const { return unit_shards_->max_whole_units(); }
  // Units whole now (0 between steps).
  int64_t whole_units() const { return unit_shards_->whole_units(); }

 protected:
  MemoryBytes memory() const override;

 private:
  // Every trainable parameter whole, in new tensors with the model's strides. Collective.
  std::vector<torch::Tensor> whole_params() const;
  // The index of `tensor` in params_, or -1.
  int64_t param_index(const torch::Tensor& tensor) const;

  ZeroOptions options_;
  UnitModule* units_ = nullptr;  // the model, with unit_shards_ installed as its hooks
  PsPlan plan_;
  std::unique_ptr<PsShard> shard_;
  std::unique_ptr<UnitShards> unit_shards_;
};

}  // namespace dtrain::dist
