// Weighted linear least squares for the small models the fits use (a parabola per IsoFLOP budget, a
// quadratic surface per batch-size x learning-rate grid): the normal equations, solved by Gaussian
// elimination with partial pivoting. Callers centre and scale their variables so the system stays well
// conditioned.
#ifndef LMFORGE_SCALING_FIT_LEAST_SQUARES_H_
#define LMFORGE_SCALING_FIT_LEAST_SQUARES_H_

#include <vector>

#include "absl/status/statusor.h"

namespace lmf::scaling {

// The coefficients c minimising sum_i w_i (y_i - features_i . c)^2. `features` holds one row per point,
// every row as long (the number of coefficients, at most 16); `weights` may be empty (all ones). Fails when
// the rows differ in length, a value is not finite, a weight is negative, or the system is singular (fewer
// points of positive weight than coefficients, or features that do not vary independently).
absl::StatusOr<std::vector<double>> WeightedLeastSquares(const std::vector<std::vector<double>>& features,
                                                         const std::vector<double>& y,
                                                         const std::vector<double>& weights = {});

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_FIT_LEAST_SQUARES_H_
