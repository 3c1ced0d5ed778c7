// Chinchilla Approach 3 (see parametric.h): the Huber objective on log loss with its analytic gradient,
// L-BFGS through Ceres' GradientProblemSolver, and the grid of starts spread over a thread pool.
#include "scaling/fit/parametric.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "ceres/gradient_problem.h"
#include "ceres/gradient_problem_solver.h"

namespace lmf::scaling {

double ParametricLaw::Loss(double params, double tokens) const {
  return E + A / std::pow(params, alpha) + B / std::pow(tokens, beta);
}

Allocation OptimalAllocation(const ParametricLaw& law, double flops, double flops_per_param_token) {
  const double sum = law.alpha + law.beta;
  const double g = std::pow(law.alpha * law.A / (law.beta * law.B), 1.0 / sum);
  const double half = flops / flops_per_param_token;  // N * D
  Allocation out;
  out.params = g * std::pow(half, law.beta / sum);
  out.tokens = half / out.params;
  out.loss = law.Loss(out.params, out.tokens);
  return out;
}

double ParamsExponent(const ParametricLaw& law) { return law.beta / (law.alpha + law.beta); }
double TokensExponent(const ParametricLaw& law) { return law.alpha / (law.alpha + law.beta); }

ParametricLaw LawFromSolution(const ParametricStart& x) {
  ParametricLaw law;
  law.A = std::exp(x.a);
  law.B = std::exp(x.b);
  law.E = std::exp(x.e);
  law.alpha = x.alpha;
  law.beta = x.beta;
  return law;
}

std::vector<ParametricStart> GridStarts(const ParametricFitOptions& options) {
  std::vector<ParametricStart> starts;
  for (double alpha : options.grid_alpha)
    for (double beta : options.grid_beta)
      for (double e : options.grid_e)
        for (double a : options.grid_a)
          for (double b : options.grid_b) starts.push_back({a, b, e, alpha, beta});
  return starts;
}

absl::StatusOr<ParametricData> ParametricData::Create(const Observations& observations) {
  if (observations.size() < 5) {
    return absl::InvalidArgumentError(absl::StrCat("the parametric fit L(N, D) = E + A/N^alpha + B/D^beta needs at ",
                                                   "least 5 runs (one per parameter); got ", observations.size()));
  }
  ParametricData data;
  for (size_t i = 0; i < observations.size(); ++i) {
    const Observation& o = observations[i];
    const bool ok = std::isfinite(o.params) && std::isfinite(o.tokens) && std::isfinite(o.loss) && o.params > 0 &&
                    o.tokens > 0 && o.loss > 0;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("run ", i, " has params=", o.params, " tokens=", o.tokens,
                                                     " loss=", o.loss,
                                                     "; the parametric fit needs all three finite and positive"));
    }
    data.log_params_.push_back(std::log(o.params));
    data.log_tokens_.push_back(std::log(o.tokens));
    data.log_loss_.push_back(std::log(o.loss));
  }
  return data;
}

double ParametricData::Objective(const double* x, const double* weights, double huber_delta,
                                 double* gradient) const {
  const double a = x[0], b = x[1], e = x[2], alpha = x[3], beta = x[4];
  double total = 0;
  double g[5] = {0, 0, 0, 0, 0};
  const int n = size();
  for (int i = 0; i < n; ++i) {
    const double w = weights == nullptr ? 1.0 : weights[i];
    if (w == 0) continue;
    const double u1 = a - alpha * log_params_[i];
    const double u2 = b - beta * log_tokens_[i];
    const double m = std::max(u1, std::max(u2, e));
    const double p1 = std::exp(u1 - m), p2 = std::exp(u2 - m), p3 = std::exp(e - m);
    const double sum = p1 + p2 + p3;
    const double r = m + std::log(sum) - log_loss_[i];
    const double abs_r = std::fabs(r);
    double slope;  // d Huber / d r
    if (abs_r <= huber_delta) {
      total += w * 0.5 * r * r;
      slope = r;
    } else {
      total += w * huber_delta * (abs_r - 0.5 * huber_delta);
      slope = r > 0 ? huber_delta : -huber_delta;
    }
    if (gradient != nullptr) {
      const double s = w * slope / sum;  // times the softmax weights p_k / sum
      g[0] += s * p1;
      g[1] += s * p2;
      g[2] += s * p3;
      g[3] -= s * p1 * log_params_[i];
      g[4] -= s * p2 * log_tokens_[i];
    }
  }
  if (gradient != nullptr) std::copy(g, g + 5, gradient);
  return total;
}

namespace {

class HuberObjective final : public ceres::FirstOrderFunction {
 public:
  HuberObjective(const ParametricData& data, const double* weights, double delta)
      : data_(data), weights_(weights), delta_(delta) {}
  bool Evaluate(const double* x, double* cost, double* gradient) const override {
    *cost = data_.Objective(x, weights_, delta_, gradient);
    return std::isfinite(*cost);
  }
  int NumParameters() const override { return 5; }

 private:
  const ParametricData& data_;
  const double* weights_;
  double delta_;
};

}  // namespace

ParametricFit FitParametricFromStarts(const ParametricData& data, const double* weights,
                                      const std::vector<ParametricStart>& starts,
                                      const ParametricFitOptions& options) {
  ceres::GradientProblemSolver::Options solver_options;
  solver_options.line_search_direction_type = ceres::LBFGS;
  solver_options.max_num_iterations = options.max_iterations;
  solver_options.function_tolerance = options.function_tolerance;
  solver_options.gradient_tolerance = options.gradient_tolerance;
  solver_options.parameter_tolerance = options.parameter_tolerance;
  solver_options.logging_type = ceres::SILENT;
  // Bisection rather than cubic interpolation in the line search: as fast here, and it never hands Ceres the
  // degenerate (constant) interpolating polynomial it warns about on flat stretches of the Huber objective.
  solver_options.line_search_interpolation_type = ceres::BISECTION;
  solver_options.minimizer_progress_to_stdout = false;

  ParametricFit best;
  best.objective = std::numeric_limits<double>::infinity();
  // GradientProblem takes ownership of the function; one problem serves every start.
  ceres::GradientProblem problem(new HuberObjective(data, weights, options.huber_delta));
  for (const ParametricStart& start : starts) {
    double x[5] = {start.a, start.b, start.e, start.alpha, start.beta};
    ceres::GradientProblemSolver::Summary summary;
    ceres::Solve(solver_options, problem, x, &summary);
    ++best.starts;
    if (summary.termination_type == ceres::CONVERGENCE) ++best.starts_converged;
    const double cost = data.Objective(x, weights, options.huber_delta, nullptr);
    if (std::isfinite(cost) && cost < best.objective) {
      best.objective = cost;
      best.solution = {x[0], x[1], x[2], x[3], x[4]};
    }
  }
  best.law = LawFromSolution(best.solution);
  return best;
}

absl::StatusOr<ParametricFit> FitParametric(const Observations& observations, const ParametricFitOptions& options,
                                            ThreadPool* pool) {
  absl::StatusOr<ParametricData> data = ParametricData::Create(observations);
  if (!data.ok()) return data.status();
  const std::vector<ParametricStart> starts = GridStarts(options);
  if (starts.empty()) return absl::InvalidArgumentError("the grid of starts for the parametric fit is empty");
  if (pool == nullptr) pool = &ThreadPool::Default();

  std::mutex mu;
  ParametricFit best;
  best.objective = std::numeric_limits<double>::infinity();
  pool->ParallelFor(static_cast<int64_t>(starts.size()), 16, [&](int64_t begin, int64_t end) {
    std::vector<ParametricStart> chunk(starts.begin() + begin, starts.begin() + end);
    ParametricFit local = FitParametricFromStarts(*data, nullptr, chunk, options);
    std::lock_guard<std::mutex> lock(mu);
    best.starts += local.starts;
    best.starts_converged += local.starts_converged;
    if (local.objective < best.objective) {
      best.objective = local.objective;
      best.solution = local.solution;
      best.law = local.law;
    }
  });
  if (!std::isfinite(best.objective)) {
    return absl::InternalError("no start of the parametric fit reached a finite objective");
  }
  return best;
}

}  // namespace lmf::scaling
