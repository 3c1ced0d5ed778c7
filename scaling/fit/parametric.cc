// Chinchilla Approach 3 (see parametric.h): the Huber objective on log loss with its analytic gradient,
// L-BFGS through Ceres' GradientProblemSolver, and the grid of starts spread over a thread pool.
#include "scaling/fit/parametric.h"

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ceres/gradient_problem.h"
#include "ceres/gradient_problem_solver.h"
#include "glog/logging.h"

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

const char* ParametricObjectiveName(ParametricObjective objective) {
  return objective == ParametricObjective::kHuberLikelihood ? "huber_likelihood" : "huber_sum";
}

absl::StatusOr<ParametricObjective> ParseParametricObjective(const std::string& name) {
  if (name == "huber_sum") return ParametricObjective::kHuberSum;
  if (name == "huber_likelihood") return ParametricObjective::kHuberLikelihood;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown Approach 3 objective '", name, "': expected huber_sum or huber_likelihood"));
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
  data.ones_.assign(observations.size(), 1.0);
  return data;
}

namespace {

// Values within `relative` of the previous distinct one count as the same.
int DistinctValues(std::vector<double> v, double relative) {
  std::sort(v.begin(), v.end());
  int distinct = 0;
  for (size_t i = 0; i < v.size(); ++i) distinct += i == 0 || v[i] > v[i - 1] * (1 + relative);
  return distinct;
}

}  // namespace

absl::Status CheckParametricIdentifiable(const Observations& observations) {
  std::vector<double> n, d, loss;
  for (const Observation& o : observations) {
    n.push_back(o.params);
    d.push_back(o.tokens);
    loss.push_back(o.loss);
  }
  const int distinct_n = DistinctValues(n, 1e-6), distinct_d = DistinctValues(d, 1e-6);
  if (distinct_n < kMinDistinctParametricValues || distinct_d < kMinDistinctParametricValues) {
    return absl::FailedPreconditionError(
        absl::StrCat("the runs have ", distinct_n, " distinct model size(s) N and ", distinct_d,
                     " distinct token count(s) D; L(N, D) = E + A/N^alpha + B/D^beta needs at least ",
                     kMinDistinctParametricValues,
                     " of each (with two, any exponent fits the one difference of loss they give)"));
  }
  if (DistinctValues(loss, 1e-6) == 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("every run has the same loss (", loss[0], "): it shows no dependence on N or D to fit"));
  }
  // The smaller principal standard deviation of the points (ln N, ln D): their RMS distance from the line
  // that fits them best.
  const double count = static_cast<double>(observations.size());
  double mean_n = 0, mean_d = 0;
  for (size_t i = 0; i < n.size(); ++i) mean_n += std::log(n[i]) / count, mean_d += std::log(d[i]) / count;
  double snn = 0, sdd = 0, snd = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    const double u = std::log(n[i]) - mean_n, v = std::log(d[i]) - mean_d;
    snn += u * u / count, sdd += v * v / count, snd += u * v / count;
  }
  const double half_trace = 0.5 * (snn + sdd);
  const double root = std::sqrt(std::max(0.0, half_trace * half_trace - (snn * sdd - snd * snd)));
  const double spread = std::sqrt(std::max(0.0, half_trace - root));
  if (!(spread >= kMinParametricSpread)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the runs lie along one line in (ln N, ln D) (RMS distance %.3g from it; at least %g needed): N and "
        "D did not vary independently (one IsoFLOP budget, or a fixed tokens per parameter), so a change of "
        "loss cannot be credited to N or to D and the compute-optimal allocation is not determined; add runs "
        "at another budget",
        spread, kMinParametricSpread));
  }
  return absl::OkStatus();
}

absl::Status CheckParametricLaw(const ParametricLaw& law) {
  if (law.alpha > 0 && law.beta > 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "the best fit has alpha = %.3g and beta = %.3g: the loss does not fall with %s, and such a law has no "
      "compute-optimal allocation (at fixed compute its loss has no minimum), so it is not used",
      law.alpha, law.beta,
      !(law.alpha > 0) && !(law.beta > 0) ? "N or with D"
      : !(law.alpha > 0)                  ? "N (alpha <= 0)"
                                          : "D (beta <= 0)"));
}

namespace {

// Points [begin, end) one at a time with libm; writes the gradient of these points when not null.
double ScalarObjective(const double* log_params, const double* log_tokens, const double* log_loss,
                       const double* weights, int begin, int end, const double* x, double huber_delta,
                       double* gradient) {
  const double a = x[0], b = x[1], e = x[2], alpha = x[3], beta = x[4];
  double total = 0;
  double g[5] = {0, 0, 0, 0, 0};
  for (int i = begin; i < end; ++i) {
    const double w = weights == nullptr ? 1.0 : weights[i];
    if (w == 0) continue;
    const double u1 = a - alpha * log_params[i];
    const double u2 = b - beta * log_tokens[i];
    const double m = std::max(u1, std::max(u2, e));
    const double p1 = std::exp(u1 - m), p2 = std::exp(u2 - m), p3 = std::exp(e - m);
    const double sum = p1 + p2 + p3;
    const double r = m + std::log(sum) - log_loss[i];
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
      g[3] -= s * p1 * log_params[i];
      g[4] -= s * p2 * log_tokens[i];
    }
  }
  if (gradient != nullptr) std::copy(g, g + 5, gradient);
  return total;
}

}  // namespace

#ifdef __AVX2__
namespace {

// exp(x) for x <= 0 (x below -700 is taken as -700, giving ~1e-304): x = n ln2 + r with |r| <= ln2 / 2,
// exp(r) by its Taylor series to r^12 (relative error < 2e-16), times 2^n built in the exponent bits.
inline __m256d ExpNonPositive(__m256d x) {
  x = _mm256_max_pd(x, _mm256_set1_pd(-700.0));
  const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(1.4426950408889634)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(0.6931471803691238), x);  // ln2, high part
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(1.9082149292705877e-10), r);      // ln2, low part
  __m256d p = _mm256_set1_pd(1.0 / 479001600);                                // 1/12!
  const double inv_factorial[] = {1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720,
                                  1.0 / 120,      1.0 / 24,      1.0 / 6,      0.5,          1.0,          1.0};
  for (double c : inv_factorial) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(c));
  // 2^n: (n + 1023) << 52 as the bits of a double.
  const __m128i n32 = _mm256_cvtpd_epi32(n);
  const __m256i bits = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(n32), _mm256_set1_epi64x(1023)), 52);
  return _mm256_mul_pd(p, _mm256_castsi256_pd(bits));
}

// log(s) for normal positive s: s = 2^k f with f in [sqrt(1/2), sqrt(2)), log f = 2 atanh(z) with
// z = (f - 1) / (f + 1), |z| <= 0.172, by its series to z^23 (error < 1e-18).
inline __m256d LogPositive(__m256d s) {
  const __m256i bits = _mm256_castpd_si256(s);
  __m256i k = _mm256_sub_epi64(_mm256_srli_epi64(bits, 52), _mm256_set1_epi64x(1023));
  __m256d f = _mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi64x(0x000FFFFFFFFFFFFFll)),
                                                  _mm256_set1_epi64x(0x3FF0000000000000ll)));  // f in [1, 2)
  const __m256d big = _mm256_cmp_pd(f, _mm256_set1_pd(1.4142135623730951), _CMP_GE_OQ);
  f = _mm256_blendv_pd(f, _mm256_mul_pd(f, _mm256_set1_pd(0.5)), big);
  k = _mm256_add_epi64(k, _mm256_and_si256(_mm256_castpd_si256(big), _mm256_set1_epi64x(1)));
  // k is small (|k| < 1100): convert through the low 32 bits of each lane.
  const __m256i lows = _mm256_permutevar8x32_epi32(k, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
  const __m256d kd = _mm256_cvtepi32_pd(_mm256_castsi256_si128(lows));
  const __m256d z = _mm256_div_pd(_mm256_sub_pd(f, _mm256_set1_pd(1.0)), _mm256_add_pd(f, _mm256_set1_pd(1.0)));
  const __m256d z2 = _mm256_mul_pd(z, z);
  __m256d p = _mm256_set1_pd(1.0 / 23);
  for (int odd = 21; odd >= 1; odd -= 2) p = _mm256_fmadd_pd(p, z2, _mm256_set1_pd(1.0 / odd));
  return _mm256_fmadd_pd(kd, _mm256_set1_pd(0.6931471805599453), _mm256_mul_pd(_mm256_mul_pd(z, p), _mm256_set1_pd(2.0)));
}

inline double HorizontalSum(__m256d v) {
  const __m128d lo = _mm256_castpd256_pd128(v), hi = _mm256_extractf128_pd(v, 1);
  const __m128d s = _mm_add_pd(lo, hi);
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

}  // namespace
#endif  // __AVX2__

double ParametricData::Objective(const double* x, const double* weights, double huber_delta,
                                 double* gradient) const {
#ifdef __AVX2__
  const double* w = weights == nullptr ? ones_.data() : weights;
  const int n = size(), n4 = n & ~3;
  const __m256d a = _mm256_set1_pd(x[0]), b = _mm256_set1_pd(x[1]), e = _mm256_set1_pd(x[2]);
  const __m256d alpha = _mm256_set1_pd(x[3]), beta = _mm256_set1_pd(x[4]);
  const __m256d delta = _mm256_set1_pd(huber_delta), neg_delta = _mm256_set1_pd(-huber_delta);
  const __m256d half = _mm256_set1_pd(0.5), sign_mask = _mm256_set1_pd(-0.0);
  __m256d total = _mm256_setzero_pd(), g0 = total, g1 = total, g2 = total, g3 = total, g4 = total;
  for (int i = 0; i < n4; i += 4) {
    const __m256d ln_n = _mm256_loadu_pd(&log_params_[i]), ln_d = _mm256_loadu_pd(&log_tokens_[i]);
    const __m256d wi = _mm256_loadu_pd(w + i);
    const __m256d u1 = _mm256_fnmadd_pd(alpha, ln_n, a), u2 = _mm256_fnmadd_pd(beta, ln_d, b);
    const __m256d m = _mm256_max_pd(_mm256_max_pd(u1, u2), e);
    const __m256d p1 = ExpNonPositive(_mm256_sub_pd(u1, m)), p2 = ExpNonPositive(_mm256_sub_pd(u2, m));
    const __m256d p3 = ExpNonPositive(_mm256_sub_pd(e, m));
    const __m256d sum = _mm256_add_pd(_mm256_add_pd(p1, p2), p3);
    const __m256d r = _mm256_sub_pd(_mm256_add_pd(m, LogPositive(sum)), _mm256_loadu_pd(&log_loss_[i]));
    const __m256d abs_r = _mm256_andnot_pd(sign_mask, r);
    const __m256d inside = _mm256_cmp_pd(abs_r, delta, _CMP_LE_OQ);
    const __m256d quad = _mm256_mul_pd(_mm256_mul_pd(half, r), r);
    const __m256d lin = _mm256_mul_pd(delta, _mm256_fnmadd_pd(half, delta, abs_r));
    total = _mm256_fmadd_pd(wi, _mm256_blendv_pd(lin, quad, inside), total);
    if (gradient != nullptr) {
      const __m256d slope = _mm256_max_pd(neg_delta, _mm256_min_pd(delta, r));  // d Huber / d r
      const __m256d s = _mm256_div_pd(_mm256_mul_pd(wi, slope), sum);
      const __m256d s1 = _mm256_mul_pd(s, p1), s2 = _mm256_mul_pd(s, p2);
      g0 = _mm256_add_pd(g0, s1);
      g1 = _mm256_add_pd(g1, s2);
      g2 = _mm256_fmadd_pd(s, p3, g2);
      g3 = _mm256_fnmadd_pd(s1, ln_n, g3);
      g4 = _mm256_fnmadd_pd(s2, ln_d, g4);
    }
  }
  // The last n % 4 points go through the scalar code.
  double tail_gradient[5] = {0, 0, 0, 0, 0};
  const double result = HorizontalSum(total) +
                        ScalarObjective(log_params_.data(), log_tokens_.data(), log_loss_.data(), w, n4, n, x,
                                        huber_delta, gradient != nullptr ? tail_gradient : nullptr);
  if (gradient != nullptr) {
    gradient[0] = HorizontalSum(g0) + tail_gradient[0];
    gradient[1] = HorizontalSum(g1) + tail_gradient[1];
    gradient[2] = HorizontalSum(g2) + tail_gradient[2];
    gradient[3] = HorizontalSum(g3) + tail_gradient[3];
    gradient[4] = HorizontalSum(g4) + tail_gradient[4];
  }
  return result;
#else
  return ObjectiveReference(x, weights, huber_delta, gradient);
#endif
}

double ParametricData::ObjectiveReference(const double* x, const double* weights, double huber_delta,
                                          double* gradient) const {
  return ScalarObjective(log_params_.data(), log_tokens_.data(), log_loss_.data(), weights, 0, size(), x, huber_delta,
                         gradient);
}

std::vector<double> ParametricData::Residuals(const double* x) const {
  std::vector<double> r(log_params_.size());
  for (size_t i = 0; i < r.size(); ++i) {
    const double u1 = x[0] - x[3] * log_params_[i], u2 = x[1] - x[4] * log_tokens_[i];
    const double m = std::max(u1, std::max(u2, x[2]));
    r[i] = m + std::log(std::exp(u1 - m) + std::exp(u2 - m) + std::exp(x[2] - m)) - log_loss_[i];
  }
  return r;
}

double HuberNegativeLogLikelihood(const ParametricData& data, const double* x, const double* weights,
                                  double huber_delta, double scale) {
  double total_weight = 0;
  for (int i = 0; i < data.size(); ++i) total_weight += weights == nullptr ? 1.0 : weights[i];
  const double log_normaliser =
      std::log(std::sqrt(2 * M_PI) * std::erf(huber_delta / std::sqrt(2.0)) +
               2 * std::exp(-0.5 * huber_delta * huber_delta) / huber_delta);
  // Huber_delta(r / s) = Huber_{delta s}(r) / s^2.
  return data.Objective(x, weights, huber_delta * scale, nullptr) / (scale * scale) +
         total_weight * (std::log(scale) + log_normaliser);
}

double FittedHuberScale(const ParametricData& data, const double* x, const double* weights, double huber_delta) {
  const std::vector<double> r = data.Residuals(x);
  double total_weight = 0, largest = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    const double w = weights == nullptr ? 1.0 : weights[i];
    total_weight += w;
    if (w > 0) largest = std::max(largest, std::fabs(r[i]));
  }
  if (largest == 0) return 0;
  // sum w psi(r / s) r / s - W falls from +inf (s -> 0) to -W (s -> inf) as s grows: bracket its root in
  // log s, then bisect.
  auto excess = [&](double log_s) {
    const double s = std::exp(log_s);
    double sum = 0;
    for (size_t i = 0; i < r.size(); ++i) {
      const double w = weights == nullptr ? 1.0 : weights[i], z = std::fabs(r[i]) / s;
      sum += w * (z <= huber_delta ? z * z : huber_delta * z);
    }
    return sum - total_weight;
  };
  double low = std::log(largest) - 1, high = std::log(largest) + 1;
  for (int k = 0; k < 400 && excess(low) <= 0; ++k) low -= 2;
  for (int k = 0; k < 400 && excess(high) > 0; ++k) high += 2;
  for (int k = 0; k < 200 && high - low > 1e-15 * std::max(1.0, std::fabs(low)); ++k) {
    const double mid = 0.5 * (low + high);
    (excess(mid) > 0 ? low : high) = mid;
  }
  return std::exp(0.5 * (low + high));
}

namespace {

class HuberObjective final : public ceres::FirstOrderFunction {
 public:
  // The summed Huber loss times `factor` (which leaves its minimum where it is).
  HuberObjective(const ParametricData& data, const double* weights, double delta, double factor = 1)
      : data_(data), weights_(weights), delta_(delta), factor_(factor) {}
  bool Evaluate(const double* x, double* cost, double* gradient) const override {
    *cost = factor_ * data_.Objective(x, weights_, delta_, gradient);
    if (gradient != nullptr)
      for (int k = 0; k < 5; ++k) gradient[k] *= factor_;
    return std::isfinite(*cost);
  }
  int NumParameters() const override { return 5; }

 private:
  const ParametricData& data_;
  const double* weights_;
  double delta_;
  double factor_;
};

}  // namespace

void QuietSolverLogging() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (google::IsGoogleLoggingInitialized()) return;  // the program set glog up itself: its choice stands
    FLAGS_logtostderr = true;                          // no log files
    FLAGS_minloglevel = google::GLOG_ERROR;
    google::InitGoogleLogging("lmforge");
  });
}

namespace {

ceres::GradientProblemSolver::Options SolverOptions(const ParametricFitOptions& options) {
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
  return solver_options;
}

// The summed-Huber fit from every start, serially: the best of them.
ParametricFit BestHuberSumStart(const ParametricData& data, const double* weights,
                                const std::vector<ParametricStart>& starts, const ParametricFitOptions& options) {
  QuietSolverLogging();
  const ceres::GradientProblemSolver::Options solver_options = SolverOptions(options);
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

}  // namespace

void RefineHuberLikelihood(const ParametricData& data, const double* weights, const ParametricFitOptions& options,
                           ParametricFit* fit) {
  QuietSolverLogging();
  ceres::GradientProblemSolver::Options solver_options = SolverOptions(options);
  // Near a corner of the least-absolute-deviations fit a step descends only when it is tiny: far below the
  // default smallest step (1e-9), and more than the default 20 bisections away from the first one. With the
  // defaults the line search returns a zero step and every stage below delta = 1e-4 stops where it starts.
  solver_options.max_num_line_search_step_size_iterations = 200;
  solver_options.min_line_search_step_size = 1e-30;
  const double delta = options.huber_delta;
  double x[5] = {fit->solution.a, fit->solution.b, fit->solution.e, fit->solution.alpha, fit->solution.beta};
  double threshold = delta;  // delta s at s = 1: the summed-Huber fit `fit` holds
  // Each stage moves the threshold at most a decade, and from 1e-3 it settles near 5e-9 on Epoch's data in
  // about 10 stages; 100 is a bound that a threshold cycling between two values (never seen) cannot pass.
  for (int stage = 0; stage < 100; ++stage) {
    const double s = FittedHuberScale(data, x, weights, delta);
    if (!(s > 0)) break;  // every residual 0: the law fits exactly, nothing to refine
    const double next = std::max(delta * s, threshold / 10);
    if (stage > 0 && std::fabs(next / threshold - 1) < 1e-9) break;
    threshold = next;
    ceres::GradientProblem problem(new HuberObjective(data, weights, threshold, 1 / threshold));
    ceres::GradientProblemSolver::Summary summary;
    ceres::Solve(solver_options, problem, x, &summary);
  }
  fit->solution = {x[0], x[1], x[2], x[3], x[4]};
  fit->law = LawFromSolution(fit->solution);
  fit->scale = FittedHuberScale(data, x, weights, delta);
  fit->objective = fit->scale > 0 ? HuberNegativeLogLikelihood(data, x, weights, delta, fit->scale)
                                  : -std::numeric_limits<double>::infinity();
}

ParametricFit FitParametricFromStarts(const ParametricData& data, const double* weights,
                                      const std::vector<ParametricStart>& starts,
                                      const ParametricFitOptions& options) {
  ParametricFit best = BestHuberSumStart(data, weights, starts, options);
  if (options.objective == ParametricObjective::kHuberLikelihood && std::isfinite(best.objective)) {
    RefineHuberLikelihood(data, weights, options, &best);
  }
  return best;
}

absl::StatusOr<ParametricFit> FitParametric(const Observations& observations, const ParametricFitOptions& options,
                                            ThreadPool* pool) {
  absl::StatusOr<ParametricData> data = ParametricData::Create(observations);
  if (!data.ok()) return data.status();
  if (absl::Status s = CheckParametricIdentifiable(observations); !s.ok()) return s;
  const std::vector<ParametricStart> starts = GridStarts(options);
  if (starts.empty()) return absl::InvalidArgumentError("the grid of starts for the parametric fit is empty");
  if (pool == nullptr) pool = &ThreadPool::Default();

  std::mutex mu;
  ParametricFit best;
  best.objective = std::numeric_limits<double>::infinity();
  pool->ParallelFor(static_cast<int64_t>(starts.size()), 16, [&](int64_t begin, int64_t end) {
    std::vector<ParametricStart> chunk(starts.begin() + begin, starts.begin() + end);
    ParametricFit local = BestHuberSumStart(*data, nullptr, chunk, options);
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
  if (options.objective == ParametricObjective::kHuberLikelihood) RefineHuberLikelihood(*data, nullptr, options, &best);
  if (absl::Status s = CheckParametricLaw(best.law); !s.ok()) return s;
  return best;
}

}  // namespace lmf::scaling
