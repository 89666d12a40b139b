// PowerSGD (Vogels et al. 2019): each gradient matrix M [n, m] (a parameter viewed as
// [size(0), rest]) is sent as rank-r factors, both summable, in two all-reduces per bucket:
//   1. P = M Q with last step's Q (warm start; at first a fixed random Q, the same on every
//      rank); all-reduce P, together with the bucket's uncompressed tensors;
//   2. P = orthonormal columns of the average P (QR); Q = M^T P; all-reduce Q.
// The average over ranks of the decoded P_i Q_i^T is P Q^T with the averaged Q (both rounds
// average). Matrices that rank r would not shrink ((n + m) r >= n m) and tensors of one
// dimension (biases, norms) are averaged exactly. With error feedback M includes the residual
// and the residual becomes M - P Q_i^T, this rank's own decoded message. Round 1 starts from
// the reducer's hook, overlapping backward; round 2 when a poll from the hooks finds round 1
// done (MPI), or else in the bucket's wait() after backward (NCCL: the compute stream must
// not wait for round 1 in the middle of backward).
#pragma once

#include "dist/compression/codec.h"

namespace dtrain::dist::compression {

class PowerSgdCodec : public Codec {
 public:
  PowerSgdCodec(const CompressionOptions& options, std::shared_ptr<Communicator> comm,
                const std::vector<torch::Tensor>& params);
  std::string kind() const override { return "powersgd"; }
  Collective collective() const override { return Collective::kAllReduce; }
  std::unique_ptr<Work> launch(Bucket& bucket, int64_t step) override;
  void finish(Bucket& bucket) override;
  int64_t payload_bytes(const Bucket& bucket) const override;

  CodecState state() const override;
  int64_t state_bytes() const override;
  void set_state(CodecState state) override;

 private:
  struct Matrix {
    int64_t param, offset, rows, cols, rank;
  };
  struct Plan {
    BucketLayout layout;
    std::vector<Matrix> matrices;
    std::vector<std::pair<int64_t, int64_t>> exact;  // (offset, numel): averaged as they are
    int64_t exact_numel = 0;
  };
  struct InFlight {
    torch::Tensor first;   // [exact_numel + sum rows x rank]: exact elements, then each P
    torch::Tensor second;  // [sum cols x rank]: each Q
  };
  const Plan& plan_for(const Bucket& bucket);
  torch::Tensor& warm_q(const Matrix& matrix, const torch::Tensor& like);
  std::unique_ptr<Work> second_round(Bucket& bucket);

  std::shared_ptr<Communicator> comm_;
  int64_t rank_;
  bool error_feedback_;
  std::vector<std::vector<int64_t>> shapes_;  // by parameter
  std::vector<Plan> plans_;                   // by bucket
  std::vector<InFlight> in_flight_;           // by bucket
  ByParam q_;                                 // by parameter, [cols, rank]
};

}  // namespace dtrain::dist::compression
