// Chinchilla Approach 3: the parametric loss L(N, D) = E + A / N^alpha + B / D^beta fitted to every run at
// once, and the compute-optimal allocation it implies.
//
// The fit follows Hoffmann et al. 2022 (appendix D.2) as Besiroglu et al. 2024 ("Chinchilla Scaling: A
// replication attempt") redid it: parameters a = log A, b = log B, e = log E, alpha, beta; the prediction
// of log L is the log-sum-exp LSE(a - alpha log N, b - beta log D, e); the objective is the SUM (not the
// mean) over runs of Huber_delta(prediction - log L); L-BFGS (Ceres' GradientProblemSolver, analytic
// gradient) runs from every point of a grid of initialisations and the lowest objective wins.
//
// Points carry a weight (how many times a bootstrap resample drew them), so a resample is a weight vector
// and the data are never copied.
#ifndef LMFORGE_SCALING_FIT_PARAMETRIC_H_
#define LMFORGE_SCALING_FIT_PARAMETRIC_H_

#include <array>
#include <vector>

#include "absl/status/statusor.h"
#include "base/thread_pool.h"
#include "scaling/fit/observation.h"

namespace lmf::scaling {

struct ParametricLaw {
  double E = 0, A = 0, B = 0, alpha = 0, beta = 0;

  double Loss(double params, double tokens) const;
};

// The (N, D) that minimise L(N, D) subject to C = flops_per_param_token * N * D, in closed form
// (Hoffmann et al. eq. 4): G = (alpha A / (beta B))^(1 / (alpha + beta)),
// N_opt = G (C / k)^(beta / (alpha + beta)), D_opt = (C / k) / N_opt.
struct Allocation {
  double params = 0;
  double tokens = 0;
  double loss = 0;
};
Allocation OptimalAllocation(const ParametricLaw& law, double flops, double flops_per_param_token = 6.0);

// Exponents of N_opt ∝ C^a and D_opt ∝ C^b implied by the law: a = beta / (alpha + beta), b = 1 - a.
double ParamsExponent(const ParametricLaw& law);
double TokensExponent(const ParametricLaw& law);

// A start of the optimiser, in the fitted coordinates.
struct ParametricStart {
  double a = 0, b = 0, e = 0, alpha = 0, beta = 0;  // a = log A, b = log B, e = log E
};

struct ParametricFitOptions {
  double huber_delta = 1e-3;
  // The grid of starts is the product of these lists. The defaults are Hoffmann et al.'s grid as Epoch
  // ran it: alpha, beta in {0, 0.5, ..., 2}, e in {-1, -0.5, ..., 1}, a, b in {0, 5, ..., 25}: 4,500 starts.
  std::vector<double> grid_alpha = {0, 0.5, 1, 1.5, 2};
  std::vector<double> grid_beta = {0, 0.5, 1, 1.5, 2};
  std::vector<double> grid_e = {-1, -0.5, 0, 0.5, 1};
  std::vector<double> grid_a = {0, 5, 10, 15, 20, 25};
  std::vector<double> grid_b = {0, 5, 10, 15, 20, 25};
  int max_iterations = 2000;
  // L-BFGS stops when the objective changes by less than this fraction in one step.
  double function_tolerance = 1e-12;
  double gradient_tolerance = 1e-14;
  double parameter_tolerance = 1e-12;
};

std::vector<ParametricStart> GridStarts(const ParametricFitOptions& options);

struct ParametricFit {
  ParametricLaw law;
  ParametricStart solution;  // the same law in the fitted coordinates
  double objective = 0;      // weighted sum of Huber losses at the solution
  int starts = 0;            // starts tried
  int starts_converged = 0;  // starts whose L-BFGS run met a convergence test
};

// The data of a fit in the form the objective reads, validated once: log N, log D, log L per point.
class ParametricData {
 public:
  // Fails, naming the point, unless every observation has finite positive params, tokens and loss; needs
  // at least 5 points (one per parameter).
  static absl::StatusOr<ParametricData> Create(const Observations& observations);

  int size() const { return static_cast<int>(log_params_.size()); }
  // Weighted sum over points of Huber(prediction - log L); writes the gradient (5 values, in
  // ParametricStart order) when `gradient` is not null. `weights` may be null (all ones). Four points at a
  // time with AVX2 where the build has it (exp and log by polynomials accurate to ~1e-15 relative).
  double Objective(const double* x, const double* weights, double huber_delta, double* gradient) const;
  // The same, one point at a time with libm's exp and log: the reference the vector code is tested against.
  double ObjectiveReference(const double* x, const double* weights, double huber_delta, double* gradient) const;

 private:
  std::vector<double> log_params_, log_tokens_, log_loss_;
  std::vector<double> ones_;  // weights when none are given
};

// Whether the runs can identify the law at all, before any fitting: OK, or FailedPrecondition saying why not.
// The N term A/N^alpha has two unknowns that only differences of loss between sizes can tell apart: two
// sizes give one difference, which any alpha matches with a suitable A, so N needs at least 3 distinct
// values (sizes within 1e-6 relative of each other count as one), and likewise D. Even then N and D must
// vary independently: runs that lie along one line in (ln N, ln D) (a single IsoFLOP budget, where D falls as
// N grows; a fixed tokens-per-parameter ratio; one N or one D) credit any change of loss equally well to
// either term, so the compute-optimal split is not determined. The runs' spread across their best-fitting
// line in (ln N, ln D) (RMS distance, in ln units) must be at least kMinParametricSpread. A loss that is the
// same for every run says nothing about N or D either.
inline constexpr int kMinDistinctParametricValues = 3;
// 0.05 in ln units, ~5%: a single IsoFLOP budget spreads 0.004-0.02 across its line (rounding of steps,
// attention and embedding FLOPs), two budgets a factor 2.5 apart about 0.3 (the quickstart's design).
inline constexpr double kMinParametricSpread = 0.05;
absl::Status CheckParametricIdentifiable(const Observations& observations);

// OK when the law's loss falls with both N and D (alpha > 0 and beta > 0), else FailedPrecondition with the
// exponents: with alpha <= 0 or beta <= 0 the loss at fixed compute has no minimum, and OptimalAllocation
// means nothing (NaN, or a maximum).
absl::Status CheckParametricLaw(const ParametricLaw& law);

// Ceres logs through glog, and its WARNINGs here are L-BFGS starts that stop on a numerical failure:
// expected among thousands of starts and counted in ParametricFit::starts_converged. Unless the program has
// initialised glog itself, the first fit does it: errors to stderr, nothing below ERROR, no log files (no
// "Logging before InitGoogleLogging" lines either).
void QuietSolverLogging();

// Runs L-BFGS from each start (serially) and returns the best; `weights` may be null.
ParametricFit FitParametricFromStarts(const ParametricData& data, const double* weights,
                                      const std::vector<ParametricStart>& starts, const ParametricFitOptions& options);

// The full fit: every grid start, spread over `pool` (ThreadPool::Default() when null). Fails (before
// fitting) when CheckParametricIdentifiable does, and after it when CheckParametricLaw does.
absl::StatusOr<ParametricFit> FitParametric(const Observations& observations, const ParametricFitOptions& options,
                                            ThreadPool* pool = nullptr);

ParametricLaw LawFromSolution(const ParametricStart& x);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_FIT_PARAMETRIC_H_
