// The `ddp` strategy: data parallelism in the manner of PyTorch DDP. Every rank holds the whole
// model and optimizer; the gradients are averaged over ranks, so every rank takes the same
// step. How:
//   - attach(): rank 0's parameters and buffers are broadcast; the gradient reducer
//     (dist/reducer.h) lays the gradients out in flat buckets (`dist.ddp.bucket_mb`, the first
//     one small), first in reverse order of registration, re-planned once from the order
//     observed in the first step.
//   - Each complete bucket is all-reduced (average) as the reducer hands it over: from inside
//     backward, overlapping the rest of it (`dist.ddp.overlap`), in the same order on every
//     rank. Gradient accumulation communicates only on the last micro-step.
//   - BatchNorm buffers follow `dist.ddp.buffers` (dist/buffer_sync.h).
//   - `dist.ddp.reduce_dtype` = "bf16": the reducer casts a complete bucket's gradients into
//     a bf16 copy of the bucket (its staging tensor, kept for the run so that a CUDA graph
//     reads fixed addresses), that copy is all-reduced, and the average is widened into the
//     bucket: half the bytes on the link, and no more passes over memory than in fp32.
//   - `dist.ddp.batchnorm_beside_allreduce` = n: each bucket launched during backward asks
//     that the next n BatchNorm backwards take ATen's kernels, which run beside the
//     all-reduce, where cuDNN's persistent ones wait for its SMs (common/shared_kernels.h).
//   - Under `dist.compression`, a codec hook (dist/compression/codec_hook.h) wraps the
//     all-reduce: buckets are encoded, exchanged and decoded from the same hooks, so the
//     overlap stays; the codec's state goes into checkpoints, a file per rank.
#pragma once

#include "dist/comm/communicator.h"
#include "dist/compression/codec_hook.h"
#include "dist/options.h"
#include "dist/reducer.h"
#include "dist/replicated.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::dist {

class DdpStrategy : public ReplicatedStrategy, private CommHook {
 public:
  DdpStrategy(DdpOptions options, std::shared_ptr<Communicator> comm,
              CompressionOptions compression = {});

  std::string name() const override { return "ddp"; }
  void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) override;
  void before_forward(int64_t step) override;
  void before_backward(bool last_micro_step) override;
  std::vector<torch::Tensor> gradient_owners() override { return params_; }
  void step(double lr) override;
  void prepare_checkpoint() override;
  void save(const std::string& dir) const override;
  void load(const std::string& dir) override;
  Stats stats() const override;

  // The current bucket plan (indices into the trainable parameters), in launch order.
  BucketPlan buckets() const { return reducer_->plan(); }

 private:
  // CommHook: each bucket is all-reduced in place, or through its narrow copy.
  torch::Tensor staging(const Bucket& bucket) override { return narrow_copy(bucket); }
  std::unique_ptr<Work> launch(Bucket& bucket) override;
  void finish(Bucket& bucket) override;
  Collective collective() const override { return Collective::kAllReduce; }
  int64_t payload_bytes(const Bucket& bucket) const override;

  // The bucket's copy in the reduce dtype; undefined where it is the bucket's own dtype.
  torch::Tensor& narrow_copy(const Bucket& bucket);

  Layout plan_layout(const std::vector<int64_t>& order) const;

  DdpOptions options_;
  CompressionOptions compression_;
  std::optional<torch::ScalarType> reduce_dtype_;      // none: the parameters' own
  std::vector<torch::Tensor> narrow_;                  // by bucket, under reduce_dtype_
  std::unique_ptr<compression::CodecHook> codec_hook_;  // none without compression
  std::vector<std::string> gathered_codec_states_;     // on rank 0, by rank, for save()
};

}  // namespace dtrain::dist
