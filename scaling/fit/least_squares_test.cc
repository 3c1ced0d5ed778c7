// Tests for the weighted least-squares solver: exact recovery of a model the data follow, weights acting as
// repeated points, and singular systems refused.
#include "scaling/fit/least_squares.h"

#include <cmath>

#include "gtest/gtest.h"

namespace lmf::scaling {
namespace {

TEST(WeightedLeastSquaresTest, RecoversTheCoefficientsOfNoiselessData) {
  // y = 1 - 2 s + 0.5 t + 3 s^2 - s t + 2 t^2 on a 4 x 4 grid.
  std::vector<std::vector<double>> features;
  std::vector<double> y;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      const double s = -1 + i / 1.5, t = -1 + j / 1.5;
      features.push_back({1, s, t, s * s, s * t, t * t});
      y.push_back(1 - 2 * s + 0.5 * t + 3 * s * s - s * t + 2 * t * t);
    }
  }
  absl::StatusOr<std::vector<double>> c = WeightedLeastSquares(features, y);
  ASSERT_TRUE(c.ok()) << c.status();
  const double want[6] = {1, -2, 0.5, 3, -1, 2};
  // Round-off of a 6 x 6 system of well-scaled features: ~1e-14.
  for (int k = 0; k < 6; ++k) EXPECT_NEAR((*c)[k], want[k], 1e-12) << k;
}

TEST(WeightedLeastSquaresTest, WeightsActLikeRepeatedPoints) {
  const std::vector<std::vector<double>> features = {{1, 0}, {1, 1}, {1, 2}};
  const std::vector<double> y = {0, 2, 3};
  absl::StatusOr<std::vector<double>> weighted = WeightedLeastSquares(features, y, {1, 3, 1});
  absl::StatusOr<std::vector<double>> repeated =
      WeightedLeastSquares({{1, 0}, {1, 1}, {1, 1}, {1, 1}, {1, 2}}, {0, 2, 2, 2, 3});
  ASSERT_TRUE(weighted.ok() && repeated.ok());
  EXPECT_NEAR((*weighted)[0], (*repeated)[0], 1e-12);
  EXPECT_NEAR((*weighted)[1], (*repeated)[1], 1e-12);
}

TEST(WeightedLeastSquaresTest, RefusesSingularAndMalformedSystems) {
  // Two coefficients, one distinct point.
  absl::StatusOr<std::vector<double>> c = WeightedLeastSquares({{1, 2}, {1, 2}}, {1, 1});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("singular"), std::string::npos);
  // A zero weight removes the only point that made it solvable.
  EXPECT_FALSE(WeightedLeastSquares({{1, 0}, {1, 1}}, {0, 1}, {1, 0}).ok());
  EXPECT_FALSE(WeightedLeastSquares({{1, 0}, {1}}, {0, 1}).ok());
  EXPECT_FALSE(WeightedLeastSquares({{1, 0}, {1, NAN}}, {0, 1}).ok());
  EXPECT_FALSE(WeightedLeastSquares({{1, 0}, {1, 1}}, {0, 1}, {1, -1}).ok());
}

}  // namespace
}  // namespace lmf::scaling
