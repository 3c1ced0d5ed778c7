// Chinchilla Approach 3: the parametric loss L(N, D) = E + A / N^alpha + B / D^beta fitted to every run at
// once, and the compute-optimal allocation it implies.
//
// The fit follows Hoffmann et al. 2022 (appendix D.2) as Besiroglu et al. 2024 ("Chinchilla Scaling: A
// replication attempt") redid it: parameters a = log A, b = log B, e = log E, alpha, beta; the prediction
// of log L is the log-sum-exp LSE(a - alpha log N, b - beta log D, e); the objective is the SUM (not the
// mean) over runs of Huber_delta(prediction - log L); L-BFGS (Ceres' GradientProblemSolver, analytic
// gradient) runs from every point of a grid of initialisations and the lowest objective wins.
//
// The estimates Besiroglu et al. published (A = 482.01, B = 2085.43, ...) are not that objective's optimum
// but another's: their notebook (epoch-research/analyzing-chinchilla, data_analysis.ipynb) takes them from
// a maximum-likelihood fit in which log L = prediction + s z with z drawn from the Huber density
// exp(-Huber_delta(z)) / Z(delta) and the scale s fitted too. ParametricObjective::kHuberLikelihood is
// that fit (the summed Huber loss stays the default: it is the method their paper and Hoffmann et al. state).
//
// Points carry a weight (how many times a bootstrap resample drew them), so a resample is a weight vector
// and the data are never copied.
#ifndef LMFORGE_SCALING_FIT_PARAMETRIC_H_
#define LMFORGE_SCALING_FIT_PARAMETRIC_H_

#include <array>
#include <string>
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

// Which objective Approach 3 minimises over the law.
enum class ParametricObjective {
  // The sum over runs of Huber_delta(prediction - log L): the method Hoffmann et al. and Besiroglu et al.
  // describe.
  kHuberSum,
  // The negative log-likelihood of log L = prediction + s z, z with density exp(-Huber_delta(z)) / Z(delta),
  // minimised over the law and the scale s: the fit behind Besiroglu et al.'s published estimates. At a
  // fixed s it is the summed Huber loss with threshold delta s (Huber_delta(r / s) = Huber_{delta s}(r) / s^2),
  // and the fitted s is about the mean |residual| times delta (4.7e-6 on Epoch's data), so the threshold
  // falls to ~5e-9 and the fit is in effect least absolute deviations on log L, not the summed Huber loss
  // at delta = 1e-3, whose quadratic zone holds about a sixth of the runs (39 of 240 on Epoch's data).
  kHuberLikelihood,
};

// "huber_sum" / "huber_likelihood", as the report's --parametric_objective flag spells them.
const char* ParametricObjectiveName(ParametricObjective objective);
absl::StatusOr<ParametricObjective> ParseParametricObjective(const std::string& name);

struct ParametricFitOptions {
  ParametricObjective objective = ParametricObjective::kHuberSum;
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
  // The minimised objective at the solution: the weighted sum of Huber losses (kHuberSum) or the negative
  // log-likelihood (kHuberLikelihood).
  double objective = 0;
  double scale = 0;          // kHuberLikelihood: the fitted scale s of the residuals (0 for kHuberSum)
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
  // prediction - log L of every point at x.
  std::vector<double> Residuals(const double* x) const;

 private:
  std::vector<double> log_params_, log_tokens_, log_loss_;
  std::vector<double> ones_;  // weights when none are given
};

// The kHuberLikelihood objective: sum over points of w Huber_delta(r / scale) + W (log scale + log Z(delta)),
// W = the sum of the weights, Z(delta) = sqrt(2 pi) erf(delta / sqrt(2)) + 2 exp(-delta^2 / 2) / delta (the
// normaliser of the Huber density). `weights` may be null.
double HuberNegativeLogLikelihood(const ParametricData& data, const double* x, const double* weights,
                                  double huber_delta, double scale);
// The scale that minimises it at x: the root of sum w psi(r / s) r / s = W (psi = Huber's derivative),
// found by bisection on log s; 0 when every residual is 0 (the likelihood then has no minimum).
double FittedHuberScale(const ParametricData& data, const double* x, const double* weights, double huber_delta);

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

// Runs L-BFGS on the summed Huber loss from each start (serially) and keeps the best; for kHuberLikelihood
// then goes on from there to the likelihood's optimum (RefineHuberLikelihood). `weights` may be null.
ParametricFit FitParametricFromStarts(const ParametricData& data, const double* weights,
                                      const std::vector<ParametricStart>& starts, const ParametricFitOptions& options);

// The full fit: every grid start, spread over `pool` (ThreadPool::Default() when null). Fails (before
// fitting) when CheckParametricIdentifiable does, and after it when CheckParametricLaw does.
absl::StatusOr<ParametricFit> FitParametric(const Observations& observations, const ParametricFitOptions& options,
                                            ThreadPool* pool = nullptr);

ParametricLaw LawFromSolution(const ParametricStart& x);

// From a summed-Huber solution to the kHuberLikelihood optimum, by minimising over the law and the scale in
// turn: each stage fits the summed Huber loss with threshold delta s (scaled by 1 / (delta s) so its
// gradient stays of order one), warm-started, then s is refitted. The threshold falls by at most a factor
// 10 a stage, so each stage starts near its optimum (the loss grows less smooth as the threshold falls);
// it stops when the threshold changes by less than 1e-9 relative. Sets fit->solution, law, objective (the
// negative log-likelihood) and scale.
void RefineHuberLikelihood(const ParametricData& data, const double* weights, const ParametricFitOptions& options,
                           ParametricFit* fit);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_FIT_PARAMETRIC_H_
