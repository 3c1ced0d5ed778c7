// Tests for Chinchilla Approach 3: the objective's gradient, the closed-form compute-optimal allocation,
// recovery of a known law from noisy synthetic runs, and Epoch AI's replication of Chinchilla.
#include "scaling/fit/parametric.h"

#include <cmath>
#include <random>

#include "base/shared_data.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "scaling/published.h"

namespace lmf::scaling {
namespace {

const ParametricLaw kEpochLaw{1.8172, 482.01, 2085.43, 0.3478, 0.3658};

Observations SyntheticRuns(const ParametricLaw& law, double noise, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> eps(0, noise);
  Observations obs;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) {
      Observation o;
      o.params = std::pow(10.0, 7 + 3.0 * i / 7);
      o.tokens = std::pow(10.0, 9 + 3.0 * j / 7);
      o.flops = 6 * o.params * o.tokens;
      o.loss = law.Loss(o.params, o.tokens) * std::exp(eps(rng));
      obs.push_back(o);
    }
  }
  return obs;
}

TEST(ParametricDataTest, GradientMatchesFiniteDifferences) {
  absl::StatusOr<ParametricData> data = ParametricData::Create(SyntheticRuns(kEpochLaw, 0.02, 3));
  ASSERT_TRUE(data.ok());
  // A point away from the optimum; delta = 0.5 puts most residuals in the quadratic part of the Huber
  // loss, where the objective is smooth and central differences are accurate to O(h^2).
  const double x[5] = {6.0, 7.5, 0.6, 0.33, 0.37};
  const double delta = 0.5;
  double grad[5];
  data->Objective(x, nullptr, delta, grad);
  for (int k = 0; k < 5; ++k) {
    const double h = 1e-6;
    double xp[5], xm[5];
    std::copy(x, x + 5, xp);
    std::copy(x, x + 5, xm);
    xp[k] += h;
    xm[k] -= h;
    const double numeric = (data->Objective(xp, nullptr, delta, nullptr) - data->Objective(xm, nullptr, delta, nullptr)) / (2 * h);
    // Round-off of the ~1e1-sized objective over 2h = 2e-6 is ~1e-9 absolute; 1e-6 relative is ample.
    EXPECT_NEAR(grad[k], numeric, 1e-6 * std::max(1.0, std::fabs(numeric))) << "parameter " << k;
  }
}

TEST(ParametricDataTest, VectorObjectiveMatchesTheLibmReference) {
  // 61 runs (not a multiple of 4, so the scalar tail is used too), random weights, and parameter points
  // from the grid's corners where exp underflows and one term dominates the log-sum-exp.
  Observations obs = SyntheticRuns(kEpochLaw, 0.02, 5);
  obs.resize(61);
  absl::StatusOr<ParametricData> data = ParametricData::Create(obs);
  ASSERT_TRUE(data.ok());
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<int> draws(0, 3);
  std::vector<double> weights(obs.size());
  for (double& w : weights) w = draws(rng);
  const double points[][5] = {{6.0, 7.5, 0.6, 0.33, 0.37}, {0, 0, -1, 0, 0},  {25, 25, 1, 2, 2},
                              {25, 0, 1, 0, 2},            {0, 25, -1, 2, 0}, {6.2, 7.6, 0.597, 0.348, 0.366}};
  for (const auto& x : points) {
    for (double delta : {1e-3, 0.5}) {
      for (const double* w : {static_cast<const double*>(nullptr), static_cast<const double*>(weights.data())}) {
        double g[5], g_ref[5];
        const double f = data->Objective(x, w, delta, g);
        const double f_ref = data->ObjectiveReference(x, w, delta, g_ref);
        // The polynomial exp and log are within a few ulp of libm; summed over 61 runs in a different
        // order the results agree to ~1e-14 relative.
        EXPECT_NEAR(f, f_ref, 1e-13 * std::max(1.0, std::fabs(f_ref)));
        for (int k = 0; k < 5; ++k) EXPECT_NEAR(g[k], g_ref[k], 1e-12 * std::max(1.0, std::fabs(g_ref[k])));
      }
    }
  }
}

TEST(ParametricDataTest, WeightsActLikeRepeatedRuns) {
  Observations obs = SyntheticRuns(kEpochLaw, 0.02, 4);
  Observations repeated = obs;
  repeated.push_back(obs[5]);
  repeated.push_back(obs[5]);
  std::vector<double> weights(obs.size(), 1.0);
  weights[5] = 3;
  const double x[5] = {6.0, 7.5, 0.6, 0.33, 0.37};
  EXPECT_NEAR(ParametricData::Create(obs)->Objective(x, weights.data(), 1e-3, nullptr),
              ParametricData::Create(repeated)->Objective(x, nullptr, 1e-3, nullptr), 1e-12);
}

TEST(ParametricDataTest, RejectsBadRunsByIndex) {
  Observations obs = SyntheticRuns(kEpochLaw, 0, 1);
  obs[3].tokens = 0;
  absl::StatusOr<ParametricData> data = ParametricData::Create(obs);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("run 3"), std::string::npos);
  EXPECT_FALSE(ParametricData::Create(Observations(4)).ok());
}

// Designs that cannot tell the N term from the D term are refused before fitting, with the reason; each
// of these got a confident N_opt before (an LR-only sweep: N = 2.3e6 at 1e15 FLOP; lr x n_layers: N = 3.9e8
// at D/N = 0.001).
TEST(FitParametricTest, RefusesRunsThatCannotIdentifyTheLaw) {
  const ParametricLaw truth{1.69, 406.4, 410.7, 0.34, 0.28};
  auto run = [&](double n, double d) { return Observation{n, d, 6 * n * d, 0, truth.Loss(n, d)}; };
  auto refusal = [](const Observations& obs) {
    absl::StatusOr<ParametricFit> fit = FitParametric(obs, ParametricFitOptions());
    EXPECT_FALSE(fit.ok());
    EXPECT_EQ(fit.status().code(), absl::StatusCode::kFailedPrecondition) << fit.status();
    return std::string(fit.status().message());
  };
  Observations lr_only;  // one size, one length, five learning rates
  for (double noise : {1.0, 1.01, 0.99, 1.02, 0.98}) {
    lr_only.push_back(run(1e7, 1e9));
    lr_only.back().loss *= noise;
  }
  EXPECT_NE(refusal(lr_only).find("1 distinct model size(s) N and 1 distinct token count(s) D"),
            std::string::npos);
  Observations lr_by_layers;  // two sizes (n_layers 1, 2), one length, three learning rates
  for (double n : {1e7, 2e7})
    for (double noise : {1.0, 1.01, 0.99}) {
      lr_by_layers.push_back(run(n, 1e9));
      lr_by_layers.back().loss *= noise;
    }
  EXPECT_NE(refusal(lr_by_layers).find("2 distinct model size(s) N and 1 distinct"), std::string::npos);
  Observations one_budget, fixed_ratio;
  for (int i = 0; i < 7; ++i) {
    const double n = 1e7 * std::pow(10.0, 0.25 * i);
    one_budget.push_back(run(n, 1e18 / (6 * n)));
    fixed_ratio.push_back(run(n, 20 * n));
  }
  EXPECT_NE(refusal(one_budget).find("lie along one line in (ln N, ln D)"), std::string::npos);
  EXPECT_NE(refusal(fixed_ratio).find("lie along one line in (ln N, ln D)"), std::string::npos);
  Observations constant = SyntheticRuns(truth, 0, 1);
  for (Observation& o : constant) o.loss = 2.0;
  EXPECT_NE(refusal(constant).find("every run has the same loss (2)"), std::string::npos);
  // Two budgets a factor 2.5 apart are enough, as is the 8 x 8 grid of sizes and lengths.
  Observations two_budgets = one_budget;
  for (int i = 0; i < 7; ++i) {
    const double n = 1e7 * std::pow(10.0, 0.25 * i);
    two_budgets.push_back(run(n, 2.5e18 / (6 * n)));
  }
  EXPECT_TRUE(CheckParametricIdentifiable(two_budgets).ok()) << CheckParametricIdentifiable(two_budgets);
  EXPECT_TRUE(CheckParametricIdentifiable(SyntheticRuns(truth, 0.01, 2)).ok());
}

// Loss that rises with N (alpha < 0) has no compute-optimal allocation: the fit is refused with its
// exponents instead of giving N_opt = NaN.
TEST(FitParametricTest, RefusesALawWhoseLossDoesNotFallWithNAndD) {
  Observations rising;
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 6; ++j) {
      const double n = std::pow(10.0, 6 + 0.5 * i), d = std::pow(10.0, 8 + 0.5 * j);
      rising.push_back({n, d, 6 * n * d, 0, 1.5 + 0.05 * std::pow(n, 0.1) + 300 / std::pow(d, 0.3)});
    }
  }
  absl::StatusOr<ParametricFit> fit = FitParametric(rising, ParametricFitOptions());
  ASSERT_FALSE(fit.ok()) << "alpha " << fit->law.alpha << " beta " << fit->law.beta;
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(fit.status().message().find("the loss does not fall with N (alpha <= 0)"), std::string::npos)
      << fit.status();
  EXPECT_FALSE(CheckParametricLaw({1.7, 400, 400, 0.3, -0.1}).ok());
  EXPECT_TRUE(CheckParametricLaw({1.7, 400, 400, 0.3, 0.1}).ok());
}

// Ceres's warnings (an L-BFGS start stopped by a numerical failure) leaked to stderr with "Logging before
// InitGoogleLogging()"; after a fit, glog prints nothing below ERROR.
TEST(FitParametricTest, SolverWarningsStayOffStderr) {
  testing::internal::CaptureStderr();
  absl::StatusOr<ParametricFit> fit =
      FitParametric(SyntheticRuns(kEpochLaw, 0.01, 7), ParametricFitOptions());
  LOG(WARNING) << "Numerical failure in L-BFGS update (as Ceres logs it)";
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(err, "");
}

TEST(OptimalAllocationTest, MatchesABruteForceSearchAlongTheBudget) {
  const double c = 5.76e23;  // Chinchilla's budget
  const Allocation closed = OptimalAllocation(kEpochLaw, c);
  EXPECT_NEAR(6 * closed.params * closed.tokens / c, 1, 1e-12);
  double best_loss = INFINITY, best_n = 0;
  for (int i = 0; i <= 200000; ++i) {  // ln N on a grid of step 5e-5 over [ln 1e9, ln 1e12]
    const double n = std::exp(std::log(1e9) + i * (std::log(1e12) - std::log(1e9)) / 200000);
    const double loss = kEpochLaw.Loss(n, c / (6 * n));
    if (loss < best_loss) {
      best_loss = loss;
      best_n = n;
    }
  }
  EXPECT_NEAR(std::log(closed.params / best_n), 0, 1e-4);  // within the grid step
  EXPECT_NEAR(closed.loss, best_loss, 1e-9);
  EXPECT_NEAR(ParamsExponent(kEpochLaw), 0.3658 / (0.3478 + 0.3658), 1e-12);
}

TEST(FitParametricTest, RecoversAKnownLawFromNoisyRuns) {
  const ParametricLaw truth{1.69, 406.4, 410.7, 0.34, 0.28};  // Hoffmann et al.'s published law
  ParametricFitOptions options;
  absl::StatusOr<ParametricFit> fit = FitParametric(SyntheticRuns(truth, 0.005, 11), options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  // 0.5% log-noise on 64 runs over 3 decades in N and D. The spread of the estimates over seeds (from the
  // bootstrap test's repeated draws) is ~0.01 in alpha and beta and ~2% in E; A and B move with their
  // exponents (A ~ N^alpha), so they get a wider, log-scale tolerance.
  EXPECT_NEAR(fit->law.E, truth.E, 0.05);
  EXPECT_NEAR(fit->law.alpha, truth.alpha, 0.03);
  EXPECT_NEAR(fit->law.beta, truth.beta, 0.03);
  EXPECT_NEAR(std::log(fit->law.A / truth.A), 0, 0.6);
  EXPECT_NEAR(std::log(fit->law.B / truth.B), 0, 0.6);
  const Allocation want = OptimalAllocation(truth, 1e22), got = OptimalAllocation(fit->law, 1e22);
  EXPECT_NEAR(std::log(got.params / want.params), 0, 0.25);
  EXPECT_NEAR(got.loss / want.loss, 1, 0.01);
  EXPECT_EQ(fit->starts, 4500);
}

// Besiroglu et al. 2024 (arXiv:2404.10102, Table: "Our estimates") fit Epoch's 240 points (245 minus the 5
// highest losses) and report E = 1.8172 (SE 0.03), A = 482.01 (124.58), B = 2085.43 (1293.23),
// alpha = 0.3478 (0.02), beta = 0.3658 (0.02). The summed Huber loss they describe gives E = 1.8172,
// A = 477.8, B = 2143.4, alpha = 0.3473, beta = 0.3672 (a = beta/(alpha+beta) = 0.5138 against their 0.5126),
// the same optimum their notebook's summed-Huber grid search prints (A = 477.84, B = 2143.86). Their
// published A, B, alpha and beta are the optimum of another objective, the Huber likelihood with a fitted
// scale (HuberLikelihoodGivesEpochsPublishedFit below); their E, 1.8172, is this fit's. Our objective,
// 0.0010183, is below the one at their published values, 0.0010228, as it must be: those minimise another one.
TEST(FitParametricTest, ReproducesEpochChinchillaReplication) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/epoch_chinchilla_svg_extracted_data.csv");
  absl::StatusOr<Observations> all = ReadEpochChinchilla(path);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 245u);
  const Observations kept = DropHighestLoss(*all, 5);
  ASSERT_EQ(kept.size(), 240u);
  absl::StatusOr<ParametricFit> fit = FitParametric(kept, ParametricFitOptions());
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->law.E, 1.8172, 5e-4);
  EXPECT_NEAR(fit->law.alpha, 0.3478, 0.002);
  EXPECT_NEAR(fit->law.beta, 0.3658, 0.002);
  EXPECT_NEAR(fit->law.A / 482.01, 1, 0.02);
  EXPECT_NEAR(fit->law.B / 2085.43, 1, 0.04);
  EXPECT_NEAR(ParamsExponent(fit->law), 0.5126, 0.002);
  absl::StatusOr<ParametricData> data = ParametricData::Create(kept);
  const double published[5] = {std::log(482.01), std::log(2085.43), std::log(1.8172), 0.3478, 0.3658};
  EXPECT_LT(fit->objective, data->Objective(published, nullptr, 1e-3, nullptr));
  EXPECT_NEAR(fit->objective, 0.00101827, 1e-8);
}

// The objective behind Besiroglu et al.'s published estimates (their notebook's `objective`, minimised from
// Hoffmann et al.'s values with BFGS): the Huber negative log-likelihood with a fitted scale. From our grid
// of starts it gives their notebook's printed fit, A = 482.00572, B = 2085.43420, E = 1.81686,
// alpha = 0.34781, beta = 0.36585, negative log-likelihood -879.7731390602344 (scale e^-12.26662388), to the
// last digit printed.
TEST(FitParametricTest, HuberLikelihoodGivesEpochsPublishedFit) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/epoch_chinchilla_svg_extracted_data.csv");
  const Observations kept = DropHighestLoss(*ReadEpochChinchilla(path), 5);
  ParametricFitOptions options;
  options.objective = ParametricObjective::kHuberLikelihood;
  absl::StatusOr<ParametricFit> fit = FitParametric(kept, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  // Half a unit in the last digit the notebook prints, or 1e-8 relative for A and B, printed to 8 and 9
  // digits: the optimum is a corner of a least-absolute-deviations fit, smoothed at the threshold
  // delta s ~ 5e-9, and two optimisers stopping near it agree to about that (B: 4.6e-9 relative).
  EXPECT_NEAR(fit->law.A, 482.00572, 482 * 1e-8);
  EXPECT_NEAR(fit->law.B, 2085.43420, 2085 * 1e-8);
  EXPECT_NEAR(fit->law.E, 1.81686, 5e-6);
  EXPECT_NEAR(fit->law.alpha, 0.34781, 5e-6);
  EXPECT_NEAR(fit->law.beta, 0.36585, 5e-6);
  EXPECT_NEAR(std::log(fit->scale), -12.26662388, 5e-5);
  // Their BFGS stopped on "precision loss" at the same point: our optimum is at least as good, and equal
  // within the 1e-7 the value is printed to.
  EXPECT_LE(fit->objective, -879.7731390602344 + 1e-7);
  EXPECT_NEAR(fit->objective, -879.7731390602344, 1e-7);
}

// The likelihood fit stops where neither the law nor the scale can lower the negative log-likelihood, and
// the scale solves its own equation (the likelihood's minimum over s).
TEST(FitParametricTest, HuberLikelihoodFitIsAMinimumOverLawAndScale) {
  const ParametricLaw truth{1.69, 406.4, 410.7, 0.34, 0.28};
  const Observations runs = SyntheticRuns(truth, 0.01, 21);
  ParametricFitOptions options;
  options.objective = ParametricObjective::kHuberLikelihood;
  absl::StatusOr<ParametricFit> fit = FitParametric(runs, options);
  ASSERT_TRUE(fit.ok()) << fit.status();
  absl::StatusOr<ParametricData> data = ParametricData::Create(runs);
  const double x[5] = {fit->solution.a, fit->solution.b, fit->solution.e, fit->solution.alpha, fit->solution.beta};
  const double s = fit->scale;
  EXPECT_NEAR(fit->objective, HuberNegativeLogLikelihood(*data, x, nullptr, 1e-3, s), 1e-9);
  for (double f : {0.999, 1.001}) {
    EXPECT_GT(HuberNegativeLogLikelihood(*data, x, nullptr, 1e-3, s * f), fit->objective) << "scale x " << f;
  }
  for (int k = 0; k < 5; ++k) {
    for (double h : {-1e-4, 1e-4}) {
      double moved[5];
      std::copy(x, x + 5, moved);
      moved[k] += h;
      EXPECT_GT(HuberNegativeLogLikelihood(*data, moved, nullptr, 1e-3, s), fit->objective)
          << "parameter " << k << " moved by " << h;
    }
  }
  // 1% log-noise on 64 runs: the law comes back as well as the summed-Huber fit brings it back.
  EXPECT_NEAR(fit->law.alpha, truth.alpha, 0.03);
  EXPECT_NEAR(fit->law.beta, truth.beta, 0.03);
  EXPECT_NEAR(fit->law.E, truth.E, 0.05);
  EXPECT_EQ(ParseParametricObjective("huber_likelihood").value(), ParametricObjective::kHuberLikelihood);
  EXPECT_EQ(ParseParametricObjective("huber_sum").value(), ParametricObjective::kHuberSum);
  EXPECT_FALSE(ParseParametricObjective("mean").ok());
}

}  // namespace
}  // namespace lmf::scaling
