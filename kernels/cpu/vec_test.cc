// The vector helpers agree with scalar loops at every length (tails included); Exp is within 2 ulp of
// std::exp over the whole range where the result is a normal float, and handles the ends.
#include "kernels/cpu/vec.h"

#include <algorithm>
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

// Every tail length (masked lanes) gives the values and sum of the full vectors, and writes nothing past n.
TEST(Vec, ExpShiftSumTailsMatchFullVectors) {
  float x[16], full[16];
  for (int i = 0; i < 16; ++i) x[i] = -0.37f * static_cast<float>(i) + 1.5f;
  ExpShiftSum(x, 0.5f, full, 16);
  for (int64_t n = 0; n <= 16; ++n) {
    float y[17];
    std::fill(y, y + 17, -7.0f);
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) want_sum += full[i];
    const float sum = ExpShiftSum(x, 0.5f, y, n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], full[i]) << "n=" << n << " i=" << i;
    for (int64_t i = n; i < 17; ++i) EXPECT_EQ(y[i], -7.0f) << "n=" << n << " wrote past the end at " << i;
    // n <= 16 positive terms in fp32, summed in two orders: a few ulps of the sum.
    EXPECT_NEAR(sum, want_sum, 4e-7 * want_sum + 1e-30) << "n=" << n;
  }
}

// The padded form gives ExpShiftSum's values and sum bit for bit for every n, whatever lies past n in x
// (garbage, NaN, +inf), writes zeros from n up to n rounded up to 8, and nothing after.
TEST(Vec, ExpShiftSumPaddedEqualsExpShiftSumAndZeroesThePadding) {
  for (int64_t n = 0; n <= 24; ++n) {
    float x[32], want[32], y[32];
    for (int i = 0; i < 32; ++i) x[i] = -0.29f * static_cast<float>(i) + 2.5f;
    for (int i = static_cast<int>(n); i < 32; ++i) x[i] = i % 3 == 0 ? NAN : (i % 3 == 1 ? INFINITY : 1e30f);
    const float want_sum = ExpShiftSum(x, 0.75f, want, n);
    std::fill(y, y + 32, -7.0f);
    const float sum = ExpShiftSumPadded(x, 0.75f, y, n);
    EXPECT_EQ(sum, want_sum) << "n=" << n;
    const int64_t padded = (n + 7) / 8 * 8;
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], want[i]) << "n=" << n << " i=" << i;
    for (int64_t i = n; i < padded; ++i) EXPECT_EQ(y[i], 0.0f) << "n=" << n << " padding at " << i;
    for (int64_t i = padded; i < 32; ++i)
      EXPECT_EQ(y[i], -7.0f) << "n=" << n << " wrote past the padding at " << i;
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
  // The overflow edge: finite up to 127.5 ln 2 = 88.376, +inf from there (exp(88.7) is within 1.4x of
  // FLT_MAX).
  float edge[8] = {88.3f, 88.37f, 88.38f, 88.7f, -87.3f, -87.4f, 0.5f, -0.5f}, e[8];
  ExpShiftSum(edge, 0.0f, e, 8);
  for (int i : {0, 1, 4}) {
    const double want = std::exp(static_cast<double>(edge[i]));
    EXPECT_NEAR(e[i], want, 3e-7 * want) << "x=" << edge[i];
  }
  EXPECT_TRUE(std::isinf(e[2]));
  EXPECT_TRUE(std::isinf(e[3]));
  // NaN stays NaN, in a full vector and in a tail, and makes the sum NaN (a NaN loss is caught, not hidden).
  float nan_in[11] = {0.0f, NAN, -1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -2.0f, NAN, 0.0f}, nan_out[11];
  EXPECT_TRUE(std::isnan(ExpShiftSum(nan_in, 0.0f, nan_out, 8)));
  EXPECT_TRUE(std::isnan(nan_out[1]));
  EXPECT_NEAR(nan_out[2], std::exp(-1.0f), 3e-7f);
  EXPECT_TRUE(std::isnan(ExpShiftSum(nan_in + 8, 0.0f, nan_out + 8, 3)));
  EXPECT_TRUE(std::isnan(nan_out[9]));
  EXPECT_EQ(e[5], 0.0f);
}

}  // namespace
}  // namespace lmf::kernels::vec
