// AllClose passes within tolerance and fails with the worst element named; CheckGradient accepts a
// correct gradient and rejects a wrong one.
#include "kernels/testing/compare.h"

#include <cmath>

#include "gtest/gtest.h"

namespace lmf::kernels::testing {
namespace {

TEST(Compare, AllCloseUsesAbsolutePlusRelativeTolerance) {
  std::vector<float> expected = {1.0f, 100.0f, 0.0f};
  EXPECT_TRUE(AllClose("x", {1.0f + 1e-6f, 100.0f + 1e-4f, 1e-7f}, expected, 1e-5, 1e-6));
  auto r = AllClose("x", {1.0f, 100.1f, 0.0f}, expected, 1e-5, 1e-6);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("worst at index 1"), std::string::npos) << r.message();
}

TEST(Compare, NonFiniteValuesMustMatch) {
  EXPECT_TRUE(AllClose("x", {-INFINITY, NAN}, {-INFINITY, NAN}, 0, 0));
  EXPECT_FALSE(AllClose("x", {1.0f}, {NAN}, 1, 1));
  EXPECT_FALSE(AllClose("x", {INFINITY}, {-INFINITY}, 1, 1));
  EXPECT_FALSE(AllClose("x", {1.0f, 2.0f}, {1.0f}, 1, 1));
}

TEST(Compare, CheckGradientAcceptsRightAndRejectsWrongGradients) {
  std::vector<float> x = {0.5f, -1.0f, 2.0f};
  auto loss = [&] {
    double s = 0;
    for (float v : x) s += std::sin(static_cast<double>(v)) * v;
    return s;
  };
  std::vector<float> good(3), bad(3);
  for (int i = 0; i < 3; ++i) {
    good[i] = static_cast<float>(std::cos(x[i]) * x[i] + std::sin(x[i]));
    bad[i] = good[i] * 1.01f;
  }
  EXPECT_TRUE(CheckGradient("sin(x) x", x, loss, good, 1e-3, 1e-3, 1e-4));
  EXPECT_FALSE(CheckGradient("sin(x) x", x, loss, bad, 1e-3, 1e-3, 1e-4));
  EXPECT_EQ(x[2], 2.0f) << "x is restored";
}

}  // namespace
}  // namespace lmf::kernels::testing
