#include "dist/compression/gram_schmidt.h"

#include <algorithm>

namespace dtrain::dist::compression {

namespace {

// A floor for the norms: a row that projects to zero divides by it and stays zero, where
// dividing by its zero norm would make NaNs. The smallest normal float (and bfloat16), or
// half's; far below any gradient's norm in float64 too.
double norm_floor(torch::ScalarType dtype) {
  return dtype == torch::kHalf ? 6.103515625e-05 : 1.1754943508222875e-38;
}

}  // namespace

void orthonormalize_rows_(torch::Tensor& batch) {
  const int64_t rows = batch.size(1), cols = batch.size(2);
  // A zero row j becomes e_j (a Householder QR's reflection is then the identity).
  const torch::Tensor zero = batch.norm(2, {2}).eq(0).narrow(1, 0, std::min(rows, cols));
  batch.diagonal(0, 1, 2).add_(zero.to(batch.scalar_type()));
  const double smallest = norm_floor(batch.scalar_type());
  for (int64_t j = 0; j < rows; ++j) {
    torch::Tensor row = batch.narrow(1, j, 1);  // [B, 1, m]
    row.div_(row.norm(2, {2}, true).clamp_min_(smallest));
    if (j + 1 == rows) break;
    // The later rows lose their part along this one: rest -= (rest q^T) q.
    torch::Tensor rest = batch.narrow(1, j + 1, rows - j - 1);
    rest.baddbmm_(torch::bmm(rest, row.transpose(1, 2)), row, 1.0, -1.0);
  }
}

}  // namespace dtrain::dist::compression
