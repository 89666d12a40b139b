#include "dist/compression/gram_schmidt.h"

#include <algorithm>

namespace dtrain::dist::compression {

namespace {

// The smallest normal number of the dtype: a column that projects to zero divides by it and
// stays zero, where dividing by its zero norm would make NaNs.
double smallest_normal(torch::ScalarType dtype) {
  return dtype == torch::kHalf ? 6.103515625e-05 : 1.1754943508222875e-38;  // float, bfloat16
}

}  // namespace

void orthonormalize_columns_(torch::Tensor& batch) {
  const int64_t rows = batch.size(1), cols = batch.size(2);
  // A zero column j becomes e_j (a Householder QR's reflection is then the identity).
  const torch::Tensor zero = batch.norm(2, {1}).eq(0).narrow(1, 0, std::min(rows, cols));
  batch.diagonal(0, 1, 2).add_(zero.to(batch.scalar_type()));
  const double tiny = smallest_normal(batch.scalar_type());
  for (int64_t j = 0; j < cols; ++j) {
    torch::Tensor column = batch.narrow(2, j, 1);  // [B, m, 1]
    column.div_(column.norm(2, {1}, true).clamp_min_(tiny));
    if (j + 1 == cols) break;
    // The later columns lose their part along this one: rest -= q (q^T rest).
    torch::Tensor rest = batch.narrow(2, j + 1, cols - j - 1);
    rest.baddbmm_(column, torch::bmm(column.transpose(1, 2), rest), 1.0, -1.0);
  }
}

}  // namespace dtrain::dist::compression
