// PowerSGD (Vogels et al. 2019): each gradient matrix M [n, m] (a parameter viewed as
// [size(0), rest]) is sent as rank-r factors, both summable, in two all-reduces per bucket:
//   1. P = M Q with last step's Q (warm start; at first a fixed random Q, the same on every
//      rank); all-reduce P, together with the bucket's uncompressed tensors;
//   2. P = orthonormal columns of the average P (Gram-Schmidt); Q = M^T P; all-reduce Q.
// The average over ranks of the decoded P_i Q_i^T is P Q^T with the averaged Q (both rounds
// average); a rank that keeps a shard of the bucket (ZeRO-2) rebuilds only the rows of P Q^T
// that reach into it, and copies only its exact tensors' elements (still all-reduced with P:
// a reduce-scatter of their own would be a third collective per bucket, to save at most half
// of their bytes, 7% of ResNet-50's at rank 4; docs/ARCHITECTURE.md). Matrices that rank r
// would not shrink ((n + m) r >= n m) and tensors of one dimension (biases, norms) are
// averaged exactly. With error feedback M includes the residual
// and the residual becomes M - P Q_i^T, this rank's own decoded message. A bucket of exact
// tensors alone (every matrix, at a rank that would not shrink it) is all-reduced as it is,
// holding no state: no residual, factors, buffers or index. A step whose averaged Qs are not
// finite (a non-finite gradient: a step that train.nonfinite = "skip" or fp16 loss scaling
// skips) leaves the previous Qs as the warm start, so one bad step does not spoil the next. Round 1 starts from
// the reducer's hook, overlapping backward; round 2 in the bucket's wait(), at the same point
// of every rank's sequence of collectives (dist/compression/chained_work.h): after backward
// under DDP (NCCL: the compute stream must not wait for round 1 in the middle of backward),
// when bucket b + 2 launches under ZeRO-2's two shared buffers.
// A bucket's matrices are grouped by shape and even spacing (dist/compression/powersgd_plan.h),
// so that each product is one batched matrix product per group on a strided view of the
// bucket, and the orthogonalisation one batched Gram-Schmidt per bucket (no QR, which on a
// GPU is a cuSOLVER call per matrix): a fixed number of operations per group and per bucket
// rather than per matrix and per tensor. Each group's factors lie back to back in the
// payloads, which are also where Q stays as the next step's warm start, and the tensors sent
// as they are move in and out in one indexed copy each way: nothing is copied per tensor.
#pragma once

#include "dist/compression/codec.h"
#include "dist/compression/powersgd_plan.h"

namespace dtrain::dist::compression {

class PowerSgdCodec : public Codec {
 public:
  // Rank 0 warns where `options.rank` compresses none of `params`.
  PowerSgdCodec(const CompressionOptions& options, std::shared_ptr<Communicator> comm,
                Share share, const std::vector<torch::Tensor>& params);
  std::string kind() const override { return "powersgd"; }
  Collective collective() const override { return Collective::kAllReduce; }
  std::unique_ptr<Work> launch(Bucket& bucket, int64_t step) override;
  void finish(Bucket& bucket, torch::Tensor kept) override;
  int64_t payload_bytes(const Bucket& bucket) const override;

  CodecState state() const override;
  int64_t state_bytes() const override;
  void set_state(CodecState state) override;

 private:
  // A bucket's plan and the buffers it keeps between steps (made once per plan: no
  // allocation in the step).
  struct Entry {
    bool planned = false;
    PowerSgdPlan plan;
    // Undefined where the plan compresses nothing (the bucket is all-reduced as it is):
    torch::Tensor first;     // [exact_numel + p_numel]: the exact elements, then each group's P
    torch::Tensor second;    // [q_numel]: each group's Q, kept as the next step's warm start
    torch::Tensor previous;  // [q_numel]: the Qs before this step's, kept if it is not finite
    torch::Tensor padded;    // [num_matrices, max_rank, max_rows]: every P^T, zero-padded
    bool compresses() const { return !plan.groups.empty(); }
  };
  Entry& entry_for(const Bucket& bucket);
  // Fills `entry`'s Qs from q_, or else with the fixed random start; q_ then views them.
  void load_q(Entry& entry);
  std::unique_ptr<Work> second_round(Bucket& bucket);

  int64_t rank_;
  bool error_feedback_;
  std::vector<std::vector<int64_t>> shapes_;  // by parameter
  std::vector<Entry> entries_;                // by bucket
  // By parameter, [cols, rank]: views of each Q where its bucket keeps it (a checkpoint's
  // until that bucket's next launch), so a Q follows its parameter when buckets re-plan.
  ByParam q_;
};

}  // namespace dtrain::dist::compression
