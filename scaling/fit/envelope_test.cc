// Tests for Chinchilla Approach 1: the lower envelope of synthetic training curves drawn from a known
// Chinchilla law recovers the law's N_opt(C) exponent.
#include "scaling/fit/envelope.h"

#include <cmath>

#include "gtest/gtest.h"
#include "scaling/fit/parametric.h"

namespace lmf::scaling {
namespace {

// Curves of models trained for a long horizon, evaluated as they go: loss at tokens D is L(N, D).
std::vector<TrainingCurve> Curves(const ParametricLaw& law) {
  std::vector<TrainingCurve> curves;
  for (int i = 0; i < 25; ++i) {
    TrainingCurve c;
    c.run = "n" + std::to_string(i);
    c.params = std::pow(10.0, 7 + 0.125 * i);
    for (int s = 1; s <= 200; ++s) {
      const double d = std::pow(10.0, 8 + 4.0 * s / 200);
      c.points.push_back({d, 6 * c.params * d, law.Loss(c.params, d)});
    }
    curves.push_back(c);
  }
  return curves;
}

TEST(FitEnvelopeTest, RecoversTheComputeOptimalExponentOfTheLaw) {
  const ParametricLaw law{1.69, 406.4, 410.7, 0.34, 0.28};
  absl::StatusOr<EnvelopeFit> fit = FitEnvelope(Curves(law), EnvelopeOptions());
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_GE(fit->runs_on_envelope, 8);
  // The sizes are a grid 0.125 decades apart, so each envelope N is off by up to 1/16 decade; over the
  // ~6 decades of compute the envelope spans, that leaves the slope within ~0.02 of beta/(alpha+beta).
  EXPECT_NEAR(fit->params_law.exponent, ParamsExponent(law), 0.02);
  EXPECT_NEAR(fit->tokens_law.exponent, TokensExponent(law), 0.02);
  // The envelope's loss is the compute-optimal loss of the law at every compute it covers.
  for (const EnvelopePoint& p : fit->envelope) {
    EXPECT_NEAR(p.loss, OptimalAllocation(law, p.flops).loss, 0.01 * p.loss);
  }
}

TEST(FitEnvelopeTest, RejectsCurvesWithDecreasingCompute) {
  std::vector<TrainingCurve> curves = Curves({1.69, 406.4, 410.7, 0.34, 0.28});
  std::swap(curves[2].points[5], curves[2].points[6]);
  absl::StatusOr<EnvelopeFit> fit = FitEnvelope(curves, EnvelopeOptions());
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.status().message().find("n2"), std::string::npos);
}

TEST(FitEnvelopeTest, LeavesOutRunsWithZeroWeight) {
  std::vector<TrainingCurve> curves = Curves({1.69, 406.4, 410.7, 0.34, 0.28});
  std::vector<double> weights(curves.size(), 0.0);
  weights[3] = 1;
  absl::StatusOr<EnvelopeFit> fit = FitEnvelope(curves, EnvelopeOptions(), weights);
  ASSERT_FALSE(fit.ok());  // one run left: no slope
  weights[20] = 1;
  fit = FitEnvelope(curves, EnvelopeOptions(), weights);
  ASSERT_TRUE(fit.ok()) << fit.status();
  for (const EnvelopePoint& p : fit->envelope) EXPECT_TRUE(p.run == 3 || p.run == 20);
}

}  // namespace
}  // namespace lmf::scaling
