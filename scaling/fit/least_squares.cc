// Weighted linear least squares by the normal equations (see least_squares.h).
#include "scaling/fit/least_squares.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace lmf::scaling {

absl::StatusOr<std::vector<double>> WeightedLeastSquares(const std::vector<std::vector<double>>& features,
                                                         const std::vector<double>& y,
                                                         const std::vector<double>& weights) {
  if (features.size() != y.size() || (!weights.empty() && weights.size() != y.size())) {
    return absl::InvalidArgumentError("least squares: features, y and weights differ in length");
  }
  if (features.empty()) return absl::InvalidArgumentError("least squares: no points");
  const size_t k = features[0].size();
  if (k == 0 || k > 16) return absl::InvalidArgumentError(absl::StrCat("least squares: ", k, " coefficients"));
  std::vector<std::vector<double>> m(k, std::vector<double>(k + 1, 0.0));  // [A | b]
  for (size_t i = 0; i < y.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights[i];
    if (features[i].size() != k) {
      return absl::InvalidArgumentError(absl::StrCat("least squares: point ", i, " has ", features[i].size(),
                                                     " features, not ", k));
    }
    if (!(w >= 0) || !std::isfinite(w) || !std::isfinite(y[i])) {
      return absl::InvalidArgumentError(absl::StrCat("least squares: point ", i, " is not finite"));
    }
    if (w == 0) continue;
    for (size_t r = 0; r < k; ++r) {
      if (!std::isfinite(features[i][r])) {
        return absl::InvalidArgumentError(absl::StrCat("least squares: point ", i, " is not finite"));
      }
      for (size_t c = 0; c < k; ++c) m[r][c] += w * features[i][r] * features[i][c];
      m[r][k] += w * features[i][r] * y[i];
    }
  }
  // Gauss-Jordan elimination with partial pivoting; a pivot below 1e-12 of the largest diagonal entry is
  // taken as singular (normal equations square the conditioning, so this is ~1e-6 in the features).
  double largest = 0;
  for (size_t r = 0; r < k; ++r) largest = std::max(largest, std::fabs(m[r][r]));
  for (size_t col = 0; col < k; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < k; ++r)
      if (std::fabs(m[r][col]) > std::fabs(m[pivot][col])) pivot = r;
    std::swap(m[col], m[pivot]);
    if (!(std::fabs(m[col][col]) > 1e-12 * largest)) {
      return absl::InvalidArgumentError("least squares: singular system (too few points, or features that do not "
                                        "vary independently)");
    }
    for (size_t r = 0; r < k; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (size_t c = col; c <= k; ++c) m[r][c] -= f * m[col][c];
    }
  }
  std::vector<double> coefficients(k);
  for (size_t r = 0; r < k; ++r) coefficients[r] = m[r][k] / m[r][r];
  return coefficients;
}

}  // namespace lmf::scaling
