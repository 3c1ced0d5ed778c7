// The vector helpers agree with scalar loops at every length (tails included); Exp is within 2 ulp of
// std::exp over the whole range where the result is a normal float, and handles the ends.
#include "kernels/cpu/vec.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace lmf::kernels::vec {
namespace {

TEST(Vec, ReductionsMatchScalarLoopsAtEveryLength) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (int n = 0; n < 40; ++n) {
    std::vector<float> a(n), b(n);
    for (int i = 0; i < n; ++i) a[i] = dist(rng), b[i] = dist(rng);
    double dot = 0, sum = 0;
    float mx = -INFINITY;
    for (int i = 0; i < n; ++i) dot += double(a[i]) * b[i], sum += a[i], mx = std::max(mx, a[i]);
    // fp32 accumulation of <= 40 terms of size ~1: error well under 1e-5.
    EXPECT_NEAR(Dot(a.data(), b.data(), n), dot, 1e-5) << n;
    EXPECT_NEAR(Sum(a.data(), n), sum, 1e-5) << n;
    EXPECT_EQ(Max(a.data(), n), mx) << n;
    double ssd = 0;
    for (int i = 0; i < n; ++i) ssd += (double(a[i]) - 0.5) * (double(a[i]) - 0.5);
    EXPECT_NEAR(SumSquaredDeviation(a.data(), 0.5f, n), ssd, 1e-4) << n;
    std::vector<float> y = b;
    Axpy(0.5f, a.data(), y.data(), n);
    for (int i = 0; i < n; ++i) EXPECT_FLOAT_EQ(y[i], b[i] + 0.5f * a[i]);
  }
}

TEST(Vec, ExpIsWithinTwoUlpOfStdExp) {
  std::vector<float> x;
  for (float v = -87.0f; v < 88.0f; v += 0.0137f) x.push_back(v);
  std::vector<float> y(x.size());
  ExpShiftSum(x.data(), 0.0f, y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    EXPECT_LE(std::abs(y[i] - want), 2.0 * std::abs(want) * 1.2e-7) << "x=" << x[i];
  }
}

TEST(Vec, ExpOfExtremesIsZeroOrInfinity) {
  float x[8] = {-INFINITY, -1000.0f, -88.0f, 0.0f, 89.0f, INFINITY, 1.0f, -1.0f};
  float y[8];
  ExpShiftSum(x, 0.0f, y, 8);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_TRUE(std::isinf(y[4]));
  EXPECT_TRUE(std::isinf(y[5]));
  EXPECT_NEAR(y[6], std::exp(1.0f), 3e-7f * 2.72f);
}

}  // namespace
}  // namespace lmf::kernels::vec
