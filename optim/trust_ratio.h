// Layer-wise trust ratios of LARS and LAMB, computed for a whole parameter group at once, and
// the hook through which a sharded strategy makes the norms those of whole tensors.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace dtrain::optim {

// Sharding contract. LARS and LAMB step on whichever tensors they are given and take the norm
// of each given tensor. A strategy that hands an optimizer slices of tensors must therefore
// either give every tensor whole to one owner, or install a reducer that turns the local
// squared norms into those of the whole tensors (an all-reduce sum over the ranks holding the
// slices, for instance).
//
// `params`: the group's tensors that have a gradient, in group order. `sq_norms`: [2, n], the
// local squared norms; row 0 of the weights, row 1 of the update direction (LARS: the
// gradient; LAMB: the Adam update plus decay). Returns the global squared norms, the same
// shape, device and dtype. Called once per step for every group with trust-ratio adaptation,
// also when n = 0 (a CPU float [2, 0] tensor), so collectives stay matched across ranks.
// Unset means identity (whole tensors).
using NormReducer =
    std::function<torch::Tensor(const std::vector<torch::Tensor>& params,
                                const torch::Tensor& sq_norms)>;

// The same for one global quantity (LAMB's gradient clipping): receives the local sum of
// squared gradient entries as a 0-d tensor, returns the global sum. Called once per step when
// clipping is on, also on a rank with no gradients (a CPU float zero).
using SquaredNormReducer = std::function<torch::Tensor(const torch::Tensor& sq_norm)>;

struct TrustRatioArgs {
  double coefficient = 1.0;   // eta
  double weight_decay = 0.0;  // LARS's wd * ||w|| term of the denominator
  double eps = 0.0;
  double max_ratio = 0.0;  // 0: no clamp
};

// One launch-light pass per group, no host sync. Returns a 1-D tensor of n ratios
//   ratio_i = eta * ||w_i|| / (||u_i|| + wd * ||w_i|| + eps),
// 1 where ||w_i|| or ||u_i|| is 0 (You et al. 2017 and 2020: a zero weight, e.g. a fresh bias,
// or a zero update keeps the plain step), then min(ratio_i, max_ratio) when max_ratio > 0.
torch::Tensor trust_ratios(const std::vector<torch::Tensor>& params,
                           const std::vector<torch::Tensor>& updates, const NormReducer& reducer,
                           const TrustRatioArgs& args);

// The same from the local squared norms [2, n] of non-empty `params` and their updates,
// computed by the caller (LAMB's fused pass on CUDA).
torch::Tensor trust_ratios_of_squares(const std::vector<torch::Tensor>& params,
                                      torch::Tensor sq_norms, const NormReducer& reducer,
                                      const TrustRatioArgs& args);

}  // namespace dtrain::optim
