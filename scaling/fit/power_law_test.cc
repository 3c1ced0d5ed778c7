// Tests for least-squares lines, power laws and the Kaplan single-variable laws.
#include "scaling/fit/power_law.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace lmf::scaling {
namespace {

TEST(FitLineTest, RecoversAnExactLine) {
  const std::vector<double> x = {1, 2, 3, 4};
  std::vector<double> y;
  for (double v : x) y.push_back(3 - 0.5 * v);
  absl::StatusOr<Line> line = FitLine(x, y);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_NEAR(line->slope, -0.5, 1e-12);
  EXPECT_NEAR(line->intercept, 3, 1e-12);
}

TEST(FitLineTest, ZeroWeightsDropPoints) {
  absl::StatusOr<Line> line = FitLine({0, 1, 2}, {0, 1, 100}, {1, 1, 0});
  ASSERT_TRUE(line.ok());
  EXPECT_NEAR(line->slope, 1, 1e-12);
}

TEST(FitLineTest, RejectsOnePointAndOneDistinctX) {
  EXPECT_FALSE(FitLine({1}, {1}).ok());
  EXPECT_FALSE(FitLine({2, 2, 2}, {1, 2, 3}).ok());
  EXPECT_FALSE(FitLine({1, 2}, {1, NAN}).ok());
}

TEST(FitPowerLawTest, RecoversCoefficientAndExponentFromNoisyData) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> noise(0, 0.01);
  std::vector<double> x, y;
  for (int i = 0; i < 200; ++i) {
    const double c = std::pow(10.0, 18 + 4.0 * i / 199);
    x.push_back(c);
    y.push_back(0.3 * std::pow(c, 0.5) * std::exp(noise(rng)));
  }
  absl::StatusOr<PowerLaw> law = FitPowerLaw(x, y);
  ASSERT_TRUE(law.ok());
  // 1% log-noise over 4 decades and 200 points: the slope's standard error is ~0.01 / (sqrt(200) * 2.7) =
  // 2.6e-4, so 2e-3 is ~8 standard errors.
  EXPECT_NEAR(law->exponent, 0.5, 2e-3);
  EXPECT_NEAR(law->coefficient / 0.3, 1, 0.1);
  EXPECT_FALSE(FitPowerLaw({1, -2}, {1, 2}).ok());
}

TEST(LowerFrontierTest, KeepsRunsBetterThanEverySmallerOne) {
  const std::vector<double> x = {1, 2, 3, 4, 5};
  const std::vector<double> loss = {5, 4, 4.5, 3, 3.2};
  EXPECT_EQ(LowerFrontier(x, loss), (std::vector<int>{0, 1, 3}));
}

TEST(LowerFrontierTest, RunsAtTheSameComputeGiveOnePoint) {
  // Three runs of one budget whose FLOP counts differ by 1e-5: only the best of them is on the frontier.
  const std::vector<double> x = {1e19, 1.00001e19, 0.99999e19, 1e20};
  const std::vector<double> loss = {3.2, 3.1, 3.3, 2.9};
  EXPECT_EQ(LowerFrontier(x, loss), (std::vector<int>{1, 3}));
}

TEST(FitKaplanLawsTest, RecoversCriticalSizesAndExponents) {
  // L(N) = (8.8e13 / N)^0.076 (Kaplan et al. 2020) on a frontier, plus runs above it that must be ignored.
  Observations obs;
  for (int i = 0; i < 12; ++i) {
    const double n = std::pow(10.0, 6 + 0.5 * i);
    const double d = std::pow(10.0, 8 + 0.25 * i);
    Observation frontier;
    frontier.params = n;
    frontier.tokens = d;
    frontier.flops = 6 * n * d;
    frontier.loss = std::pow(8.8e13 / n, 0.076);
    obs.push_back(frontier);
    Observation worse = frontier;
    worse.loss *= 1.2;
    worse.params *= 1.01;
    worse.tokens *= 1.01;
    worse.flops *= 1.0201;
    obs.push_back(worse);
  }
  absl::StatusOr<KaplanLaws> laws = FitKaplanLaws(obs);
  ASSERT_TRUE(laws.ok()) << laws.status();
  EXPECT_NEAR(laws->params.alpha, 0.076, 1e-9);
  EXPECT_NEAR(laws->params.critical / 8.8e13, 1, 1e-6);
  EXPECT_EQ(laws->params.frontier.size(), 12u);
  // Along D and C the same runs follow exact power laws too: N ∝ D^2, so L ∝ D^-0.152 and C ∝ N^1.5.
  EXPECT_NEAR(laws->tokens.alpha, 0.152, 1e-9);
  EXPECT_NEAR(laws->flops.alpha, 0.076 / 1.5, 1e-9);
}

}  // namespace
}  // namespace lmf::scaling
