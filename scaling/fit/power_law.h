// Power laws y = k x^p fitted by least squares in log-log space, and the Kaplan et al. 2020 single-variable
// laws L(N), L(D), L(C) built from them. Approaches 1 and 2 use FitPowerLaw for N_opt(C) and D_opt(C).
#ifndef LMFORGE_SCALING_FIT_POWER_LAW_H_
#define LMFORGE_SCALING_FIT_POWER_LAW_H_

#include <vector>

#include "absl/status/statusor.h"
#include "scaling/fit/observation.h"

namespace lmf::scaling {

// y = coefficient * x^exponent.
struct PowerLaw {
  double coefficient = 0;
  double exponent = 0;
  double At(double x) const;
};

// Straight line y = intercept + slope x by (weighted) least squares.
struct Line {
  double intercept = 0;
  double slope = 0;
};

// `weights` may be empty (all ones). Fails unless there are at least two points with positive weight at
// distinct x, all finite.
absl::StatusOr<Line> FitLine(const std::vector<double>& x, const std::vector<double>& y,
                             const std::vector<double>& weights = {});

// Fits log y = log k + p log x. Fails unless x and y are positive and finite and FitLine can fit.
absl::StatusOr<PowerLaw> FitPowerLaw(const std::vector<double>& x, const std::vector<double>& y,
                                     const std::vector<double>& weights = {});

// Kaplan-style laws L(X) = (X_c / X)^alpha_X, i.e. PowerLaw{X_c^alpha_X, -alpha_X}. Each is fitted to the
// lower frontier of the runs along its variable: the runs whose loss is lower than that of every run with
// a smaller value of X (for L(C) this is the compute-efficient frontier). On an IsoFLOP sweep these
// frontiers hold the runs that are not held back by the other variable, which is the regime the single
// laws describe.
struct KaplanLaw {
  PowerLaw law;
  double critical = 0;  // X_c
  double alpha = 0;     // alpha_X
  std::vector<int> frontier;  // indices of the observations fitted, by increasing X
};
struct KaplanLaws {
  KaplanLaw params;  // L(N)
  KaplanLaw tokens;  // L(D)
  KaplanLaw flops;   // L(C)
};

// Indices of the lower frontier of loss along `x` (see above), sorted by x; x values within 0.1% of each
// other count as one.
std::vector<int> LowerFrontier(const std::vector<double>& x, const std::vector<double>& loss);

absl::StatusOr<KaplanLaws> FitKaplanLaws(const Observations& observations);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_FIT_POWER_LAW_H_
