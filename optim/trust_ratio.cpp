#include "optim/trust_ratio.h"

#include "optim/multi_tensor.h"

#ifdef DTRAIN_CUDA_KERNELS
#include "optim/multi_tensor_cuda.h"
#endif

namespace dtrain::optim {

torch::Tensor trust_ratios(const std::vector<torch::Tensor>& params,
                           const std::vector<torch::Tensor>& updates, const NormReducer& reducer,
                           const TrustRatioArgs& args) {
  if (params.empty()) {
    if (reducer) reducer(params, torch::zeros({2, 0}));
    return torch::ones({0});
  }
  // [2, n]: squared norms of the weights (row 0) and the updates (row 1).
  return trust_ratios_of_squares(params, squared_norms(params, &updates), reducer, args);
}

torch::Tensor trust_ratios_of_squares(const std::vector<torch::Tensor>& params,
                                      torch::Tensor sq_norms, const NormReducer& reducer,
                                      const TrustRatioArgs& args) {
  if (reducer) sq_norms = reducer(params, sq_norms);
#ifdef DTRAIN_CUDA_KERNELS
  // One kernel for the dozen elementwise ops below, each a launch of its own.
  if (sq_norms.is_cuda() && (sq_norms.scalar_type() == torch::kFloat ||
                             sq_norms.scalar_type() == torch::kDouble)) {
    return cuda::trust_ratios(sq_norms, args.coefficient, args.weight_decay, args.eps,
                              args.max_ratio);
  }
#endif
  const torch::Tensor norms = sq_norms.sqrt();
  const torch::Tensor w_norm = norms[0];
  const torch::Tensor u_norm = norms[1];
  torch::Tensor ratio =
      args.coefficient * w_norm / (u_norm + args.weight_decay * w_norm + args.eps);
  ratio = torch::where((w_norm > 0) & (u_norm > 0), ratio, torch::ones_like(ratio));
  if (args.max_ratio > 0.0) ratio = ratio.clamp_max(args.max_ratio);
  return ratio;
}

}  // namespace dtrain::optim
