// The `zero` strategy at dist.zero.stage = 2, ZeRO stage 2 (Rajbhandari et al. 2020,
// "P_os+g"): every rank holds the whole model and computes gradients on its own micro-batch,
// as in DDP, but keeps gradients and optimizer state only for its shard of every gradient
// bucket (dist/zero/bucket_shards.h). A step:
//   1. the gradient reducer (dist/reducer.h) copies the gradients of each complete bucket into
//      one of two shared flat buffers and, from inside backward, reduce-scatters it (average)
//      straight into this rank's shard of the gradients; the buffer is reused two buckets later;
//   2. this rank's optimizer steps its pieces of the parameters (dist/ps/shard.h: LARS's and
//      LAMB's per-tensor norms and LAMB's clipping norm are summed over the ranks, so they are
//      those of the unsharded run);
//   3. one all-gather per bucket writes every rank's updated shard into the model's parameters,
//      which live as views in per-bucket flat buffers of the same layout.
// The traffic is that of DDP's all-reduce; the reduce-scatters overlap backward.
//
// Under `dist.compression`, a codec hook (dist/compression/codec_hook.h) wraps step 1: each
// bucket is encoded over the whole bucket (error feedback per rank, as under DDP), exchanged
// (fp16/bf16 reduce-scattered; PowerSGD's factors and top-k's and sign messages as under
// DDP) and decoded only over this rank's shard, straight into its gradients
// (dist/compression/share.h). The codec's state goes into checkpoints, a file per rank. An
// error-feedback residual is a full-size bucket per rank: it gives back the gradient memory
// stage 2 saves (memory/codec_state_mb).
//
// Memory held by a rank for the whole run (the `memory/*` stats): the whole parameters
// (padded buckets) and a copy of its shard of them, which the optimizer updates; its shard of
// the averaged gradients; two shared bucket buffers (dist.zero.bucket_mb each); the optimizer
// state of its shard. During backward, autograd's gradients of the parameters whose bucket is
// not yet complete come on top; no full-size gradient outlives its bucket's reduce-scatter.
//
// Gradient accumulation: gradients accumulate locally (autograd sums the micro-steps' into the
// parameters' .grad) and are reduce-scattered once, on the last micro-step, as DDP does. It
// keeps the arithmetic exactly DDP's and sends one reduce-scatter per step instead of one per
// micro-step; the price is a full-size gradient held between micro-steps (DeepSpeed's stage 2
// reduces every micro-step instead, to avoid it).
//
// Checkpoints: each rank writes the optimizer state of its own pieces, and its codec state
// (dist/zero/shard_checkpoint.h); every strategy reads them back on any number of ranks.
// BatchNorm buffers are broadcast from rank 0 before every forward and evaluation; parameters
// without a gradient in a step count as zero gradients.
#pragma once

#include "dist/comm/communicator.h"
#include "dist/compression/codec_hook.h"
#include "dist/options.h"
#include "dist/ps/plan.h"
#include "dist/ps/shard.h"
#include "dist/reducer.h"
#include "dist/replicated.h"

#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

// Rank 0's start-up line: `buckets` gradient buckets, each cut into `ranks` shards, and the
// `shard_bytes` of the `total_bytes` of parameters each rank updates.
std::string stage2_plan_line(int64_t buckets, int64_t ranks, int64_t shard_bytes,
                             int64_t total_bytes);

class Zero2Strategy : public ReplicatedStrategy, private CommHook {
 public:
  Zero2Strategy(ZeroOptions options, std::shared_ptr<Communicator> comm,
                CompressionOptions compression = {});
  ~Zero2Strategy() override;

  std::string name() const override { return "zero"; }
  void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) override;
  void before_forward(int64_t step) override;
  void after_backward(bool last_micro_step) override;
  // This rank's pieces of the parameters: their gradients are its shard of the averaged ones.
  std::vector<torch::Tensor> gradient_owners() override { return shard_->pieces(); }
  void step(double lr) override;
  void load_model_state(const NamedTensors& state) override;
  void save_partition(const std::string& dir) const override;
  void save(const std::string& dir) const override;
  void load(const std::string& dir) override;
  Stats stats() const override;

  const PsPlan& plan() const { return plan_; }

 protected:
  MemoryBytes memory() const override;

 private:
  // CommHook: a complete bucket is reduce-scattered into this rank's shard of its gradients.
  std::unique_ptr<Work> launch(Bucket& bucket) override;
  Collective collective() const override { return Collective::kReduceScatter; }

  // This rank's shard of bucket b's averaged gradients.
  torch::Tensor shard_grads(const Bucket& bucket) const;

  ZeroOptions options_;
  CompressionOptions compression_;
  std::unique_ptr<compression::CodecHook> codec_hook_;  // none without compression
  PsPlan plan_;
  std::unique_ptr<PsShard> shard_;
  std::vector<torch::Tensor> param_flat_;  // per bucket: the model's parameters, as views
};

}  // namespace dtrain::dist
