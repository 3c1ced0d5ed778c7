// Tests for Chinchilla Approach 2: parabola fits, recovery of known exponents from a synthetic Chinchilla
// surface, and the Llama 3 IsoFLOP data against the paper's D_opt(C) power law.
#include "scaling/fit/isoflop.h"

#include <cmath>
#include <random>

#include "base/shared_data.h"
#include "gtest/gtest.h"
#include "scaling/fit/parametric.h"
#include "scaling/published.h"

namespace lmf::scaling {
namespace {

TEST(FitParabolaTest, RecoversAnExactParabolaAtLargeOffsets) {
  // x around ln(1e9) = 20.7: the centring inside FitParabola must keep this exact.
  std::vector<double> x, y;
  for (int i = 0; i < 7; ++i) {
    x.push_back(19 + 0.5 * i);
    y.push_back(3 + 0.2 * (x.back() - 20.5) * (x.back() - 20.5));
  }
  absl::StatusOr<Parabola> p = FitParabola(x, y);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->Vertex(), 20.5, 1e-9);
  EXPECT_NEAR(p->At(20.5), 3, 1e-9);
  EXPECT_NEAR(p->c2, 0.2, 1e-9);
}

TEST(FitParabolaTest, NeedsThreeDistinctPoints) {
  EXPECT_FALSE(FitParabola({1, 2}, {1, 2}).ok());
  EXPECT_FALSE(FitParabola({1, 1, 2}, {1, 2, 3}).ok());
}

// Samples the Chinchilla surface on IsoFLOP curves: sizes spread +-`width` decades around the true optimum.
Observations ChinchillaIsoFlops(const ParametricLaw& law, double noise, double width, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> eps(0, noise);
  Observations obs;
  for (double c : {1e18, 3e18, 1e19, 3e19, 1e20, 3e20, 1e21}) {
    const double n_opt = OptimalAllocation(law, c).params;
    for (int k = -4; k <= 4; ++k) {
      Observation o;
      o.budget = o.flops = c;
      o.params = n_opt * std::pow(10.0, width * k / 4);
      o.tokens = c / (6 * o.params);
      o.loss = law.Loss(o.params, o.tokens) * std::exp(eps(rng));
      obs.push_back(o);
    }
  }
  return obs;
}

TEST(FitIsoFlopTest, RecoversTheExponentsOfANoisyChinchillaSurface) {
  const ParametricLaw law{1.82, 482.01, 2085.43, 0.3478, 0.3658};
  // +-0.5 decades around the optimum keeps the parabola (a Taylor expansion in ln N) accurate: on
  // noise-free data the exponent bias is below 0.005 there (Czech et al. 2026 show it grows with the width).
  absl::StatusOr<IsoFlopFit> fit = FitIsoFlop(ChinchillaIsoFlops(law, 0.003, 0.5, 7));
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->budgets_used, 7);
  // 0.3% loss noise, 9 runs per budget over 3 decades of compute: the exponent's spread over seeds is
  // about 0.01 (measured over 50 seeds); 0.03 leaves room for the parabola's own bias.
  EXPECT_NEAR(fit->params_law.exponent, ParamsExponent(law), 0.03);
  EXPECT_NEAR(fit->tokens_law.exponent, TokensExponent(law), 0.03);
  for (const IsoFlopCurve& curve : fit->curves) {
    EXPECT_TRUE(curve.vertex_inside);
    EXPECT_NEAR(std::log(curve.opt_params / OptimalAllocation(law, curve.budget).params), 0, 0.25);
  }
}

TEST(FitIsoFlopTest, LeavesOutABudgetWithoutMinimumAndSaysWhy) {
  const ParametricLaw law{1.82, 482.01, 2085.43, 0.3478, 0.3658};
  Observations obs = ChinchillaIsoFlops(law, 0, 0.5, 1);
  for (int k = 0; k < 3; ++k) {  // a budget whose losses bend downwards
    Observation o;
    o.budget = o.flops = 1e22;
    o.params = 1e9 * (1 + k);
    o.tokens = 1e22 / (6 * o.params);
    o.loss = 2.0 + (k == 1 ? 0.1 : 0.0);
    obs.push_back(o);
  }
  absl::StatusOr<IsoFlopFit> fit = FitIsoFlop(obs);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->budgets_used, 7);
  EXPECT_FALSE(fit->curves.back().used);
  EXPECT_NE(fit->curves.back().reason.find("no minimum"), std::string::npos);
}

// A budget whose losses barely bend has its parabola's minimum far away, at a negative loss: that budget is
// left out with the reason (its minimum took the power law of the minimum loss, and with it the whole fit,
// down with "point 0 is (1e+22, -...)").
TEST(FitIsoFlopTest, LeavesOutABudgetWhoseMinimumPredictsANonPositiveLoss) {
  const ParametricLaw law{1.82, 482.01, 2085.43, 0.3478, 0.3658};
  Observations obs = ChinchillaIsoFlops(law, 0, 0.5, 1);
  for (int k = 0; k < 3; ++k) {  // falling almost linearly in ln N, with a slight upward bend
    Observation o;
    o.budget = o.flops = 1e22;
    o.params = 1e9 * std::exp(0.5 * k);
    o.tokens = 1e22 / (6 * o.params);
    o.loss = 2.0 - 0.5 * k + 0.001 * k * k;
    obs.push_back(o);
  }
  absl::StatusOr<IsoFlopFit> fit = FitIsoFlop(obs);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->budgets_used, 7);
  EXPECT_FALSE(fit->curves.back().used);
  EXPECT_NE(fit->curves.back().reason.find("far outside the sampled sizes"), std::string::npos)
      << fit->curves.back().reason;
}

TEST(FitIsoFlopTest, RejectsRunsWithoutABudget) {
  Observations obs(5);
  for (Observation& o : obs) o = {1e8, 1e9, 6e17, 0, 3};
  absl::StatusOr<IsoFlopFit> fit = FitIsoFlop(obs);
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.status().message().find("budget"), std::string::npos);
}

// Llama 3 (Grattafiori et al. 2024, section 3.2.1) fits D_opt(C) = A C^alpha with (alpha, A) = (0.53, 0.29)
// to the minima of parabolas through its IsoFLOP curves, and extrapolates to 16.55T tokens (a 402B model)
// at 3.8e25 FLOP. On the digitised points of their Figure 2 (eric-czech/llama3_isoflop_extraction) our
// Approach 2, with parabolas in ln D, gives alpha = 0.5368 and A = 0.2994, and 16.10T tokens at 3.8e25:
// A agrees to 3.2%, alpha to 0.007 and the extrapolation to 2.7%. The paper's rounded pair is not
// consistent with its own extrapolation (0.29 * (3.8e25)^0.53 = 10.5T, not 16.55T: 0.005 in alpha moves
// the prediction 25 decades out by 1.34x), so we check alpha to 0.01, A to 5%, and the 3.8e25 tokens
// against the paper's 16.55T to 5%.
TEST(FitIsoFlopTest, ReproducesLlama3TokensPowerLaw) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/llama3_isoflops_points.csv");
  absl::StatusOr<Observations> obs = ReadLlama3IsoFlops(path);
  ASSERT_TRUE(obs.ok()) << obs.status();
  ASSERT_EQ(obs->size(), 133u);
  absl::StatusOr<IsoFlopFit> fit = FitIsoFlop(*obs);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->budgets_used, 10);
  EXPECT_NEAR(fit->tokens_law.exponent, 0.53, 0.01);
  EXPECT_NEAR(fit->tokens_law.coefficient / 0.29, 1, 0.05);
  EXPECT_NEAR(fit->tokens_law.At(3.8e25) / 16.55e12, 1, 0.05);
}

TEST(FitIsoFlopTest, FitsTheCs336SyntheticCurves) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/cs336_a3_isoflops_curves_SYNTHETIC.json");
  absl::StatusOr<Observations> obs = ReadCs336IsoFlops(path);
  ASSERT_TRUE(obs.ok()) << obs.status();
  ASSERT_EQ(obs->size(), 72u);
  absl::StatusOr<IsoFlopFit> fit = FitIsoFlop(*obs);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->budgets_used, 9);
  // With D = C / (6N) exactly, N_opt and D_opt exponents must add up to 1.
  EXPECT_NEAR(fit->params_law.exponent + fit->tokens_law.exponent, 1, 1e-9);
}

}  // namespace
}  // namespace lmf::scaling
