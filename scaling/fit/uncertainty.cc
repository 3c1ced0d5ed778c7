// Bootstrap intervals for Approaches 2 and 3 (see uncertainty.h).
#include "scaling/fit/uncertainty.h"

#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <utility>
#include <random>

#include "absl/strings/str_cat.h"

namespace lmf::scaling {
namespace {

// Quantities recorded per Approach-3 resample, in this order.
enum ParametricQuantity { kE, kA, kB, kAlpha, kBeta, kParamsExp, kTokensExp, kOptN, kOptD, kOptL, kNumParametric };

// Two power laws refitted on every resample (Approach 1's N_opt and D_opt, the batch and lr laws): the
// intervals of their coefficients and exponents and of their values at the target, and the laws.
struct PowerLawPairUncertainty {
  Interval coefficient[2], exponent[2], at_target[2];
  std::vector<PowerLaw> laws[2];
  int resamples = 0, failed = 0;
};

// `refit` fits a resample (its weights) and writes the two laws, or returns false.
PowerLawPairUncertainty BootstrapPowerLawPair(
    int num_points, const std::vector<int>& groups, const PowerLaw (&fitted)[2], double target_flops,
    const BootstrapOptions& options, ThreadPool* pool,
    const std::function<bool(const std::vector<double>& weights, PowerLaw* laws)>& refit) {
  BootstrapSamples samples =
      RunBootstrap(num_points, groups, 4, options, pool, [&](int, const std::vector<double>& weights, double* q) {
        PowerLaw laws[2];
        if (!refit(weights, laws)) return false;
        q[0] = laws[0].coefficient, q[1] = laws[0].exponent, q[2] = laws[1].coefficient, q[3] = laws[1].exponent;
        return true;
      });
  PowerLawPairUncertainty out;
  out.resamples = samples.resamples;
  out.failed = samples.failed;
  const double c = options.confidence;
  for (int k = 0; k < 2; ++k) {
    out.coefficient[k] = PercentileInterval(samples.samples[2 * k], fitted[k].coefficient, c);
    out.exponent[k] = PercentileInterval(samples.samples[2 * k + 1], fitted[k].exponent, c);
    std::vector<double> at;
    for (size_t i = 0; i < samples.samples[2 * k].size(); ++i) {
      out.laws[k].push_back({samples.samples[2 * k][i], samples.samples[2 * k + 1][i]});
      at.push_back(out.laws[k].back().At(target_flops));
    }
    out.at_target[k] = PercentileInterval(at, fitted[k].At(target_flops), c);
  }
  return out;
}

}  // namespace

absl::StatusOr<ParametricUncertainty> BootstrapParametric(const Observations& observations, const ParametricFit& fit,
                                                          double target_flops, const BootstrapOptions& options,
                                                          const ParametricFitOptions& fit_options,
                                                          int extra_starts, ThreadPool* pool) {
  if (!(target_flops > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("target compute must be positive, got ", target_flops));
  }
  absl::StatusOr<ParametricData> data = ParametricData::Create(observations);
  if (!data.ok()) return data.status();
  const std::vector<ParametricStart> grid = GridStarts(fit_options);
  const int num_points = data->size();

  std::atomic<int> unidentifiable{0};
  BootstrapSamples samples = RunBootstrap(
      num_points, {}, kNumParametric, options, pool, [&](int resample, const std::vector<double>& weights, double* q) {
        // The runs drawn must identify the law, as the full fit's must (a draw of only two distinct sizes
        // fits any exponent to their one loss difference).
        Observations drawn;
        for (size_t i = 0; i < observations.size(); ++i) {
          if (weights[i] > 0) drawn.push_back(observations[i]);
        }
        if (!CheckParametricIdentifiable(drawn).ok()) {
          unidentifiable.fetch_add(1, std::memory_order_relaxed);
          return false;
        }
        std::vector<ParametricStart> starts = {fit.solution};
        if (extra_starts > 0 && !grid.empty()) {
          std::mt19937_64 rng(options.seed * 1000003 + resample);
          std::uniform_int_distribution<size_t> pick(0, grid.size() - 1);
          for (int s = 0; s < extra_starts; ++s) starts.push_back(grid[pick(rng)]);
        }
        const ParametricFit refit = FitParametricFromStarts(*data, weights.data(), starts, fit_options);
        // A resample whose law has no compute-optimal allocation counts as failed, as the full fit would.
        if (!std::isfinite(refit.objective) || !CheckParametricLaw(refit.law).ok()) return false;
        const ParametricLaw& law = refit.law;
        const Allocation at = OptimalAllocation(law, target_flops);
        const double values[kNumParametric] = {law.E,  law.A,        law.B,        law.alpha, law.beta,
                                               ParamsExponent(law), TokensExponent(law), at.params, at.tokens, at.loss};
        std::copy(values, values + kNumParametric, q);
        return true;
      });

  ParametricUncertainty out;
  out.resamples = samples.resamples;
  out.failed = samples.failed;
  out.unidentifiable = unidentifiable.load();
  const ParametricLaw& law = fit.law;
  const Allocation at = OptimalAllocation(law, target_flops);
  const double c = options.confidence;
  auto interval = [&](int q, double estimate) { return PercentileInterval(samples.samples[q], estimate, c); };
  out.E = interval(kE, law.E);
  out.A = interval(kA, law.A);
  out.B = interval(kB, law.B);
  out.alpha = interval(kAlpha, law.alpha);
  out.beta = interval(kBeta, law.beta);
  out.params_exponent = interval(kParamsExp, ParamsExponent(law));
  out.tokens_exponent = interval(kTokensExp, TokensExponent(law));
  out.target.flops = target_flops;
  out.target.params = interval(kOptN, at.params);
  out.target.tokens = interval(kOptD, at.tokens);
  out.target.loss = interval(kOptL, at.loss);
  const size_t kept = samples.samples[kE].size();
  for (size_t i = 0; i < kept; ++i) {
    ParametricLaw l;
    l.E = samples.samples[kE][i];
    l.A = samples.samples[kA][i];
    l.B = samples.samples[kB][i];
    l.alpha = samples.samples[kAlpha][i];
    l.beta = samples.samples[kBeta][i];
    out.resampled.push_back(l);
  }
  return out;
}

absl::StatusOr<IsoFlopUncertainty> BootstrapIsoFlop(const Observations& observations, const IsoFlopFit& fit,
                                                    double target_flops, const BootstrapOptions& options,
                                                    ThreadPool* pool) {
  if (!(target_flops > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("target compute must be positive, got ", target_flops));
  }
  std::vector<int> groups(observations.size());
  for (const IsoFlopCurve& curve : fit.curves)
    for (int i : curve.runs) groups[i] = static_cast<int>(&curve - fit.curves.data());
  enum { kNk, kNa, kDk, kDa, kLk, kLa, kCount };
  BootstrapSamples samples =
      RunBootstrap(static_cast<int>(observations.size()), groups, kCount, options, pool,
                   [&](int, const std::vector<double>& weights, double* q) {
                     absl::StatusOr<IsoFlopFit> refit = FitIsoFlop(observations, weights);
                     if (!refit.ok()) return false;
                     const double values[kCount] = {refit->params_law.coefficient, refit->params_law.exponent,
                                                    refit->tokens_law.coefficient, refit->tokens_law.exponent,
                                                    refit->loss_law.coefficient,   refit->loss_law.exponent};
                     std::copy(values, values + kCount, q);
                     return true;
                   });
  IsoFlopUncertainty out;
  out.resamples = samples.resamples;
  out.failed = samples.failed;
  const double c = options.confidence;
  out.params_coefficient = PercentileInterval(samples.samples[kNk], fit.params_law.coefficient, c);
  out.params_exponent = PercentileInterval(samples.samples[kNa], fit.params_law.exponent, c);
  out.tokens_coefficient = PercentileInterval(samples.samples[kDk], fit.tokens_law.coefficient, c);
  out.tokens_exponent = PercentileInterval(samples.samples[kDa], fit.tokens_law.exponent, c);
  std::vector<double> n_at, d_at, l_at;
  for (size_t i = 0; i < samples.samples[kNk].size(); ++i) {
    IsoFlopFit r;
    r.params_law = {samples.samples[kNk][i], samples.samples[kNa][i]};
    r.tokens_law = {samples.samples[kDk][i], samples.samples[kDa][i]};
    r.loss_law = {samples.samples[kLk][i], samples.samples[kLa][i]};
    n_at.push_back(r.params_law.At(target_flops));
    d_at.push_back(r.tokens_law.At(target_flops));
    l_at.push_back(r.loss_law.At(target_flops));
    out.resampled.push_back(r);
  }
  out.target.flops = target_flops;
  out.target.params = PercentileInterval(n_at, fit.params_law.At(target_flops), c);
  out.target.tokens = PercentileInterval(d_at, fit.tokens_law.At(target_flops), c);
  out.target.loss = PercentileInterval(l_at, fit.loss_law.At(target_flops), c);
  return out;
}

absl::StatusOr<EnvelopeUncertainty> BootstrapEnvelope(const std::vector<TrainingCurve>& curves, const EnvelopeFit& fit,
                                                      double target_flops, const BootstrapOptions& options,
                                                      ThreadPool* pool) {
  if (!(target_flops > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("target compute must be positive, got ", target_flops));
  }
  const PowerLaw fitted[2] = {fit.params_law, fit.tokens_law};
  const PowerLawPairUncertainty pair = BootstrapPowerLawPair(
      static_cast<int>(curves.size()), {}, fitted, target_flops, options, pool,
      [&](const std::vector<double>& weights, PowerLaw* laws) {
        absl::StatusOr<EnvelopeFit> refit = FitEnvelope(curves, EnvelopeOptions(), weights);
        if (!refit.ok()) return false;
        laws[0] = refit->params_law, laws[1] = refit->tokens_law;
        return true;
      });
  EnvelopeUncertainty out;
  out.resamples = pair.resamples;
  out.failed = pair.failed;
  out.params_coefficient = pair.coefficient[0];
  out.params_exponent = pair.exponent[0];
  out.tokens_coefficient = pair.coefficient[1];
  out.tokens_exponent = pair.exponent[1];
  out.target.flops = target_flops;
  out.target.params = pair.at_target[0];
  out.target.tokens = pair.at_target[1];
  return out;
}

absl::StatusOr<HyperparameterUncertainty> BootstrapHyperparameterLaws(const std::vector<HyperparameterRun>& runs,
                                                                      const HyperparameterFit& fit,
                                                                      double target_flops,
                                                                      const BootstrapOptions& options,
                                                                      const HyperparameterFitOptions& fit_options,
                                                                      ThreadPool* pool) {
  if (!(target_flops > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("target compute must be positive, got ", target_flops));
  }
  std::map<double, int> budget_index;
  std::vector<int> groups;
  for (const HyperparameterRun& r : runs) {
    groups.push_back(budget_index.emplace(r.budget, static_cast<int>(budget_index.size())).first->second);
  }
  const PowerLaw fitted[2] = {fit.batch_law, fit.lr_law};
  PowerLawPairUncertainty pair = BootstrapPowerLawPair(
      static_cast<int>(runs.size()), groups, fitted, target_flops, options, pool,
      [&](const std::vector<double>& weights, PowerLaw* laws) {
        absl::StatusOr<HyperparameterFit> refit = FitHyperparameterLaws(runs, fit_options, weights);
        if (!refit.ok()) return false;
        laws[0] = refit->batch_law, laws[1] = refit->lr_law;
        return true;
      });
  HyperparameterUncertainty out;
  out.resamples = pair.resamples;
  out.failed = pair.failed;
  out.batch_coefficient = pair.coefficient[0];
  out.batch_exponent = pair.exponent[0];
  out.lr_coefficient = pair.coefficient[1];
  out.lr_exponent = pair.exponent[1];
  out.flops = target_flops;
  out.batch_at_target = pair.at_target[0];
  out.lr_at_target = pair.at_target[1];
  out.batch_laws = std::move(pair.laws[0]);
  out.lr_laws = std::move(pair.laws[1]);
  return out;
}

Band ParametricBand(const std::vector<ParametricLaw>& laws, const std::vector<double>& flops, int which,
                    double confidence) {
  Band band;
  for (double c : flops) {
    std::vector<double> values;
    for (const ParametricLaw& law : laws) {
      const Allocation at = OptimalAllocation(law, c);
      values.push_back(which == 0 ? at.params : which == 1 ? at.tokens : at.loss);
    }
    const Interval i = PercentileInterval(values, 0, confidence);
    band.x.push_back(c);
    band.lower.push_back(i.lower);
    band.upper.push_back(i.upper);
  }
  return band;
}

Band PowerLawBand(const std::vector<PowerLaw>& laws, const std::vector<double>& x, double confidence) {
  Band band;
  for (double v : x) {
    std::vector<double> values;
    for (const PowerLaw& law : laws) values.push_back(law.At(v));
    const Interval i = PercentileInterval(values, 0, confidence);
    band.x.push_back(v);
    band.lower.push_back(i.lower);
    band.upper.push_back(i.upper);
  }
  return band;
}

}  // namespace lmf::scaling
