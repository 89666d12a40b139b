// Orthonormal columns for a batch of tall matrices in a fixed number of batched operations
// (about five per column, whatever the batch), where a QR per matrix costs a LAPACK or
// cuSOLVER call each: PowerSGD's orthogonalisation of P, as PyTorch's powerSGD hook does it.
#pragma once

#include <torch/torch.h>

namespace dtrain::dist::compression {

// Replaces the columns of every matrix of `batch` [B, m, k] (k <= m) by orthonormal columns
// spanning the same growing subspaces, in place: modified Gram-Schmidt, the R of each
// A = Q R with a positive diagonal (a Householder QR's Q can differ in the sign of each
// column, which leaves the projection Q Q^T unchanged). Zero rows stay zero (padding is
// harmless). A column that is zero from the start becomes e_j first, as a Householder QR
// leaves it, so that a zero gradient does not zero PowerSGD's warm start for good; a column
// that depends on those before it becomes zero.
void orthonormalize_columns_(torch::Tensor& batch);

}  // namespace dtrain::dist::compression
