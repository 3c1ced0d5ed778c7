// Softmax: forward and backward match PyTorch; rows sum to one; the backward matches central
// differences.
#include "kernels/softmax/softmax.h"

#include "gtest/gtest.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;

TEST(Softmax, ForwardAndBackwardMatchPyTorch) {
  testing::Fixture f("kernels/testdata/softmax.npz");
  const int64_t N = 5, C = 37;
  auto x = f.F("x", N * C), dout = f.F("dout", N * C);
  std::vector<float> out(N * C), dx(N * C);
  Context ctx = Context::Cpu();
  SoftmaxForward(ctx, {DType::kF32, N, C, x.data(), out.data()});
  SoftmaxBackward(ctx, {DType::kF32, N, C, out.data(), dout.data(), dx.data()});
  // exp within 2 ulp, a 37-term sum: 1e-5 relative; probabilities down to ~1e-8, hence atol 1e-7.
  EXPECT_TRUE(AllClose("out", out, f.F("out"), 1e-5, 1e-7));
  EXPECT_TRUE(AllClose("dx", dx, f.F("dx"), 1e-5, 1e-6));
  for (int64_t n = 0; n < N; ++n) {
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += out[n * C + c];
    EXPECT_NEAR(s, 1.0, 1e-6);
  }
}

TEST(Softmax, BackwardMatchesCentralDifferences) {
  const int64_t N = 3, C = 19;
  auto x = testing::RandomNormal(N * C, 1, 2.0f), r = testing::RandomNormal(N * C, 2);
  Context ctx = Context::Cpu();
  std::vector<float> out(N * C), dx(N * C);
  auto loss = [&] {
    SoftmaxForward(ctx, {DType::kF32, N, C, x.data(), out.data()});
    double s = 0;
    for (int64_t i = 0; i < N * C; ++i) s += static_cast<double>(out[i]) * r[i];
    return s;
  };
  loss();
  SoftmaxBackward(ctx, {DType::kF32, N, C, out.data(), r.data(), dx.data()});
  // h = 1e-3 in fp32 on a loss of O(1): noise ~1e-4; formula errors are O(1).
  EXPECT_TRUE(testing::CheckGradient("dx", x, loss, dx, 1e-3, 1e-2, 1e-3));
}

}  // namespace
}  // namespace lmf::kernels
