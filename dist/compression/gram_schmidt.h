// Orthonormal vectors for a batch of small sets of long vectors in a fixed number of batched
// operations (about five per vector, whatever the batch), where a QR per matrix costs a
// LAPACK or cuSOLVER call each: PowerSGD's orthogonalisation of its Ps, done as PyTorch's
// powerSGD hook does it.
#pragma once

#include <torch/torch.h>

namespace dtrain::dist::compression {

// Replaces the rows of every matrix of `batch` [B, k, m] (k <= m; a P^T) by orthonormal rows
// spanning the same growing subspaces, in place: modified Gram-Schmidt, the Q of
// A^T = Q R with R's diagonal positive (a Householder QR's Q can differ in the sign of each
// column, which leaves the projection Q Q^T unchanged). Zero columns stay zero (padding is
// harmless). A row that is zero from the start becomes e_j first, as a Householder QR leaves
// it, so that a zero gradient does not zero PowerSGD's warm start for good; a row that
// depends on those before it becomes zero. Rows are contiguous, so each step reads memory
// in order.
void orthonormalize_rows_(torch::Tensor& batch);

}  // namespace dtrain::dist::compression
