// Tests for the bootstrap: percentile intervals, resampling, determinism across thread counts, and the
// coverage of the Approach 2 and Approach 3 intervals and of the batch/lr laws' over repeated synthetic
// experiments.
#include "scaling/fit/uncertainty.h"

#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "gtest/gtest.h"
#include "scaling/fit/bootstrap.h"
#include "scaling/fit/envelope.h"
#include "scaling/fit/parametric_testing.h"

namespace lmf::scaling {
namespace {

TEST(PercentileIntervalTest, InterpolatesOrderStatistics) {
  std::vector<double> s(101);
  std::iota(s.begin(), s.end(), 0.0);
  const Interval i = PercentileInterval(s, 50, 0.95);
  EXPECT_NEAR(i.lower, 2.5, 1e-9);
  EXPECT_NEAR(i.upper, 97.5, 1e-9);
  EXPECT_DOUBLE_EQ(i.estimate, 50);
  EXPECT_NEAR(i.std_error, std::sqrt(101.0 * 102 / 12), 1e-9);  // variance of 0..100, n-1 denominator
}

TEST(ResampleWeightsTest, DrawsEachGroupsSizeWithinTheGroup) {
  const std::vector<int> groups = {0, 0, 0, 1, 1, 2, 2, 2, 2};
  for (int r = 0; r < 20; ++r) {
    const std::vector<double> w = ResampleWeights(groups, 9, 5, r);
    EXPECT_EQ(w[0] + w[1] + w[2], 3);
    EXPECT_EQ(w[3] + w[4], 2);
    EXPECT_EQ(w[5] + w[6] + w[7] + w[8], 4);
  }
  EXPECT_EQ(ResampleWeights(groups, 9, 5, 3), ResampleWeights(groups, 9, 5, 3));
  EXPECT_NE(ResampleWeights({}, 50, 5, 3), ResampleWeights({}, 50, 5, 4));
}

TEST(RunBootstrapTest, ResultDoesNotDependOnTheNumberOfThreads) {
  std::vector<double> x(40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.0 + i);
  auto mean = [&](int, const std::vector<double>& w, double* out) {
    double s = 0, n = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      s += w[i] * x[i];
      n += w[i];
    }
    out[0] = s / n;
    return true;
  };
  BootstrapOptions options;
  options.resamples = 300;
  ThreadPool one(1), three(3);
  const BootstrapSamples a = RunBootstrap(40, {}, 1, options, &one, mean);
  const BootstrapSamples b = RunBootstrap(40, {}, 1, options, &three, mean);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.failed, 0);
}

TEST(BootstrapEnvelopeTest, IntervalsBracketTheEstimateAndTheTruth) {
  // Curves from a known law at 25 sizes 1/8 decade apart; resampling the runs moves the envelope only
  // by which sizes are present, so the exponent's interval must be narrow and hold beta / (alpha + beta).
  const ParametricLaw law{1.69, 406.4, 410.7, 0.34, 0.28};
  std::vector<TrainingCurve> curves;
  for (int i = 0; i < 25; ++i) {
    TrainingCurve c;
    c.run = "n" + std::to_string(i);
    c.params = std::pow(10.0, 7 + 0.125 * i);
    for (int s = 1; s <= 100; ++s) {
      const double d = std::pow(10.0, 8 + 4.0 * s / 100);
      c.points.push_back({d, 6 * c.params * d, law.Loss(c.params, d)});
    }
    curves.push_back(c);
  }
  absl::StatusOr<EnvelopeFit> fit = FitEnvelope(curves, EnvelopeOptions());
  ASSERT_TRUE(fit.ok()) << fit.status();
  BootstrapOptions boot;
  boot.resamples = 100;
  absl::StatusOr<EnvelopeUncertainty> u = BootstrapEnvelope(curves, *fit, 1e23, boot);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->failed, 0);
  EXPECT_LE(u->params_exponent.lower, fit->params_law.exponent);
  EXPECT_GE(u->params_exponent.upper, fit->params_law.exponent);
  // The size grid limits the envelope to within 1/16 decade of the true N_opt: 0.03 in the exponent.
  EXPECT_NEAR(u->params_exponent.lower, ParamsExponent(law), 0.03);
  EXPECT_NEAR(u->params_exponent.upper, ParamsExponent(law), 0.03);
  EXPECT_LT(u->target.params.lower, u->target.params.upper);
}

// Coverage over repeated experiments. Each draw makes a fresh noisy data set from a known truth, fits it,
// and bootstraps 200 resamples; the truth should fall inside the 95% interval in about 95 of 100 draws.
// Counts are binomial: at a true rate of 95% the standard deviation over 100 draws is 2.2, and the
// percentile bootstrap is known to undercover slightly at these sample sizes (Efron & Tibshirani 1993,
// ch. 13), so we accept 85-100: a broken interval (e.g. one a third too narrow covers ~80%, a bootstrap
// that ignored the noise ~0%) fails, a sound one passes with probability above 0.999.
constexpr int kDraws = 100;
constexpr int kMinCovered = 85;

TEST(BootstrapCoverageTest, ParametricIntervalsCoverTheTruth) {
  const ParametricLaw truth{1.69, 406.4, 410.7, 0.34, 0.28};
  const double target = 1e22;
  const Allocation at = OptimalAllocation(truth, target);
  // Three starts per draw (the full grid finds the same optimum on this well-sampled surface; the test
  // is about the intervals, and 100 full grids would take minutes).
  ParametricFitOptions options = FewParametricStarts();
  BootstrapOptions boot;
  boot.resamples = 200;
  int covered_alpha = 0, covered_beta = 0, covered_e = 0, covered_n = 0, covered_loss = 0;
  for (int draw = 0; draw < kDraws; ++draw) {
    std::mt19937_64 rng(1000 + draw);
    std::normal_distribution<double> eps(0, 0.01);
    Observations obs;
    for (int i = 0; i < 6; ++i) {
      for (int j = 0; j < 6; ++j) {
        Observation o;
        o.params = std::pow(10.0, 7 + 3.0 * i / 5);
        o.tokens = std::pow(10.0, 9 + 3.0 * j / 5);
        o.loss = truth.Loss(o.params, o.tokens) * std::exp(eps(rng));
        obs.push_back(o);
      }
    }
    absl::StatusOr<ParametricFit> fit = FitParametric(obs, options);
    ASSERT_TRUE(fit.ok()) << fit.status();
    boot.seed = draw;
    absl::StatusOr<ParametricUncertainty> u = BootstrapParametric(obs, *fit, target, boot, options);
    ASSERT_TRUE(u.ok()) << u.status();
    covered_alpha += u->alpha.Contains(truth.alpha);
    covered_beta += u->beta.Contains(truth.beta);
    covered_e += u->E.Contains(truth.E);
    covered_n += u->target.params.Contains(at.params);
    covered_loss += u->target.loss.Contains(at.loss);
  }
  EXPECT_GE(covered_alpha, kMinCovered);
  EXPECT_GE(covered_beta, kMinCovered);
  EXPECT_GE(covered_e, kMinCovered);
  EXPECT_GE(covered_n, kMinCovered);
  EXPECT_GE(covered_loss, kMinCovered);
  std::printf("95%% intervals covering the truth in %d draws: alpha %d, beta %d, E %d, N_opt %d, loss %d\n", kDraws,
              covered_alpha, covered_beta, covered_e, covered_n, covered_loss);
}

// A resample that cannot identify L(N, D) is dropped and counted, as the full fit would be refused: here
// the third size and the third token count come from one run, which about a third of the draws lack (two
// sizes fit any alpha to their one loss difference). With that many dropped, the
// intervals are unreliable.
TEST(BootstrapParametricTest, UnidentifiableResamplesAreDroppedAndCounted) {
  const ParametricLaw truth{1.69, 406.4, 410.7, 0.34, 0.28};
  std::mt19937_64 rng(7);
  std::normal_distribution<double> eps(0, 0.01);
  Observations obs;
  auto add = [&](double n, double d) {
    Observation o;
    o.params = n;
    o.tokens = d;
    o.loss = truth.Loss(n, d) * std::exp(eps(rng));
    obs.push_back(o);
  };
  for (int copy = 0; copy < 3; ++copy) {
    for (const double n : {1e7, 1e8}) {
      for (const double d : {1e9, 1e10}) add(n, d);
    }
  }
  add(1e9, 1e11);
  ParametricFitOptions options = FewParametricStarts();
  absl::StatusOr<ParametricFit> fit = FitParametric(obs, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  BootstrapOptions boot;
  boot.resamples = 200;
  absl::StatusOr<ParametricUncertainty> u = BootstrapParametric(obs, *fit, 1e22, boot, options);
  ASSERT_TRUE(u.ok()) << u.status();
  // The same draws, checked here.
  int unidentifiable = 0;
  for (int r = 0; r < boot.resamples; ++r) {
    const std::vector<double> weights = ResampleWeights({}, static_cast<int>(obs.size()), boot.seed, r);
    Observations drawn;
    for (size_t i = 0; i < obs.size(); ++i) {
      if (weights[i] > 0) drawn.push_back(obs[i]);
    }
    unidentifiable += !CheckParametricIdentifiable(drawn).ok();
  }
  ASSERT_GT(unidentifiable, boot.resamples / 5);
  EXPECT_EQ(u->unidentifiable, unidentifiable);
  EXPECT_GE(u->failed, unidentifiable);
  EXPECT_EQ(static_cast<int>(u->resampled.size()), u->resamples - u->failed);
  EXPECT_FALSE(u->Reliable(boot.confidence));
}

TEST(BootstrapCoverageTest, IsoFlopIntervalsCoverTheTruth) {
  // IsoFLOP curves that are exact parabolas in ln N around N_opt = 0.1 C^0.5, so Approach 2 is unbiased
  // and only the noise moves it.
  const PowerLaw truth{0.1, 0.5};
  const double target = 1e23;
  int covered_exponent = 0, covered_n = 0;
  BootstrapOptions boot;
  boot.resamples = 200;
  for (int draw = 0; draw < kDraws; ++draw) {
    std::mt19937_64 rng(5000 + draw);
    std::normal_distribution<double> eps(0, 0.01);
    Observations obs;
    for (double c : {1e18, 1e19, 1e20, 1e21}) {
      const double log_opt = std::log(truth.At(c));
      for (int k = -3; k <= 3; ++k) {
        Observation o;
        o.budget = o.flops = c;
        o.params = std::exp(log_opt + 0.6 * k);
        o.tokens = c / (6 * o.params);
        const double dx = std::log(o.params) - log_opt;
        o.loss = 2 + 3.0 * std::pow(c, -0.05) + 0.05 * dx * dx + eps(rng);
        obs.push_back(o);
      }
    }
    absl::StatusOr<IsoFlopFit> fit = FitIsoFlop(obs);
    ASSERT_TRUE(fit.ok()) << fit.status();
    boot.seed = draw;
    absl::StatusOr<IsoFlopUncertainty> u = BootstrapIsoFlop(obs, *fit, target, boot);
    ASSERT_TRUE(u.ok()) << u.status();
    covered_exponent += u->params_exponent.Contains(truth.exponent);
    covered_n += u->target.params.Contains(truth.At(target));
  }
  EXPECT_GE(covered_exponent, kMinCovered);
  EXPECT_GE(covered_n, kMinCovered);
  std::printf("95%% intervals covering the truth in %d draws: N_opt exponent %d, N_opt(1e23) %d\n", kDraws,
              covered_exponent, covered_n);
}

// The batch-size and learning-rate laws: each budget's 5 x 5 grid (factors of 2 in batch and lr, placed
// at random around the optimum) follows loss = base (1 + curvature (0.004 du^2 + 0.008 dv^2 + 0.002 du dv))
// (du, dv: ln batch and ln lr from the optimum) with 0.2% log-noise; the optima follow DeepSeek LLM's laws
// B_opt = 0.292 C^0.3271 and lr_opt = 0.3118 C^-0.125 over 6 budgets. Returns how often, in 100 draws, the
// 95% intervals cover the planted exponents and values at 1e23 FLOP, their mean widths, and the failed
// resamples over all draws.
struct HyperparameterCoverage {
  int batch = 0, lr = 0, batch_at = 0, lr_at = 0;
  double batch_width = 0, lr_width = 0;  // mean widths of the exponents' intervals
  int failed = 0, resamples = 0;
};
HyperparameterCoverage CoverPlantedHyperparameterLaws(double curvature, const HyperparameterFitOptions& options) {
  const PowerLaw batch_truth{0.292, 0.3271}, lr_truth{0.3118, -0.125};
  const double target = 1e23;
  HyperparameterCoverage out;
  BootstrapOptions boot;
  boot.resamples = 200;
  for (int draw = 0; draw < kDraws; ++draw) {
    std::mt19937_64 rng(7000 + draw);
    std::normal_distribution<double> eps(0, 0.002);
    std::uniform_real_distribution<double> offset(-0.5, 0.5);
    std::vector<HyperparameterRun> runs;
    for (double c : {1e17, 3e17, 1e18, 3e18, 1e19, 3e19}) {
      const double base = 2 + 100 * std::pow(c, -0.1);
      const double shift_u = offset(rng) * std::log(2.0), shift_v = offset(rng) * std::log(2.0);
      for (int i = -2; i <= 2; ++i) {
        for (int j = -2; j <= 2; ++j) {
          const double du = i * std::log(2.0) + shift_u, dv = j * std::log(2.0) + shift_v;
          const double bowl = curvature * (0.004 * du * du + 0.008 * dv * dv + 0.002 * du * dv);
          runs.push_back({c, batch_truth.At(c) * std::exp(du), lr_truth.At(c) * std::exp(dv),
                          base * (1 + bowl) * std::exp(eps(rng))});
        }
      }
    }
    absl::StatusOr<HyperparameterFit> fit = FitHyperparameterLaws(runs, options);
    EXPECT_TRUE(fit.ok()) << fit.status();
    if (!fit.ok()) return out;
    boot.seed = draw;
    absl::StatusOr<HyperparameterUncertainty> u = BootstrapHyperparameterLaws(runs, *fit, target, boot, options);
    EXPECT_TRUE(u.ok()) << u.status();
    if (!u.ok()) return out;
    out.batch += u->batch_exponent.Contains(batch_truth.exponent);
    out.lr += u->lr_exponent.Contains(lr_truth.exponent);
    out.batch_at += u->batch_at_target.Contains(batch_truth.At(target));
    out.lr_at += u->lr_at_target.Contains(lr_truth.At(target));
    out.batch_width += (u->batch_exponent.upper - u->batch_exponent.lower) / kDraws;
    out.lr_width += (u->lr_exponent.upper - u->lr_exponent.lower) / kDraws;
    out.failed += u->failed;
    out.resamples += u->resamples;
  }
  std::printf("95%% intervals covering the truth in %d draws: B_opt exponent %d, lr_opt exponent %d, B_opt(1e23) "
              "%d, lr_opt(1e23) %d; mean widths: B_opt exponent %.4f, lr_opt exponent %.4f; %d of %d resamples "
              "failed\n",
              kDraws, out.batch, out.lr, out.batch_at, out.lr_at, out.batch_width, out.lr_width, out.failed,
              out.resamples);
  return out;
}

// A gentle bowl (every run within the 5% fit window, its loss step between neighbouring settings about ten
// times the noise): the planted exponents fall inside the 95% intervals in at least 90 of 100 draws (the
// issue's bar; binomial sd 2.2 at a true 95%).
TEST(BootstrapCoverageTest, BatchAndLearningRateIntervalsCoverThePlantedExponents) {
  const HyperparameterCoverage c = CoverPlantedHyperparameterLaws(1, {});
  EXPECT_GE(c.batch, 90);
  EXPECT_GE(c.lr, 90);
  EXPECT_GE(c.batch_at, 90);
  EXPECT_GE(c.lr_at, 90);
  // Covering by being wide does not count: the intervals are measured at a mean width of 0.066 (batch) and
  // 0.031 (lr), a fifth and a quarter of the exponents; half as wide again fails.
  EXPECT_LT(c.batch_width, 0.1);
  EXPECT_LT(c.lr_width, 0.047);
  EXPECT_EQ(c.failed, 0);
}

// A bowl 6 times as steep, as the quickstart's grids are: only 9 to 13 of each grid's 25 runs lie within the
// 5% fit window, and a resample (drawn with replacement) often keeps fewer than the 6 distinct runs over 3
// batch sizes and 3 lrs a budget's surface needs. With 6 budgets the laws still have 2 in almost every
// resample (measured: 41 of 20,000 failed), so the intervals stand and cover the truth. With only 2 budgets
// every resample needs both grids' fits: on recipe_quickstart_test's two 5 x 5 grids (11 and 16 runs within
// 15% of the best) 445 of 1000 resamples failed.
TEST(BootstrapCoverageTest, SteepGridsWithFewRunsNearTheMinimumKeepTheirIntervals) {
  const HyperparameterCoverage c = CoverPlantedHyperparameterLaws(6, {});
  EXPECT_GE(c.batch, 90);
  EXPECT_GE(c.lr, 90);
  EXPECT_GE(c.batch_at, 90);
  EXPECT_GE(c.lr_at, 90);
  EXPECT_LE(c.failed, c.resamples / 20);  // what the report's 95% intervals allow (Reliable)
}

}  // namespace
}  // namespace lmf::scaling
