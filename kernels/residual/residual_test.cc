// Residual add: the sum and the accumulating backward match PyTorch.
#include "kernels/residual/residual.h"

#include "gtest/gtest.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

TEST(Residual, ForwardAndAccumulatingBackwardMatchPyTorch) {
  testing::Fixture f("kernels/testdata/residual.npz");
  const int64_t n = 37;
  auto a = f.F("a", n), b = f.F("b", n), dout = f.F("dout", n);
  std::vector<float> out(n), da(n, 1.0f), db(n, 0.0f);
  Context ctx = Context::Cpu();
  ResidualForward(ctx, {DType::kF32, n, a.data(), b.data(), out.data()});
  // One fp32 addition, correctly rounded, against the float64 sum rounded to fp32: at most 1 ulp apart.
  EXPECT_TRUE(testing::AllClose("out", out, f.F("out"), 1.2e-7, 0));
  ResidualBackward(ctx, {DType::kF32, n, dout.data(), da.data(), db.data()});
  auto want_da = f.F("da");
  for (auto& v : want_da) v += 1.0f;
  EXPECT_TRUE(testing::AllClose("da (accumulated onto 1)", da, want_da, 1.2e-7, 0));
  EXPECT_EQ(db, f.F("db"));
}

}  // namespace
}  // namespace lmf::kernels
