// RMSNorm: forward and backward match PyTorch (float64 autograd on the same fp32 inputs); the weight
// gradient accumulates; the hand-written backward matches central differences; threads agree.
#include "kernels/rmsnorm/rmsnorm.h"

#include <tuple>

#include "gtest/gtest.h"
#include "kernels/residual/residual.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;
using testing::Fixture;

// fp32 against a float64 reference: a row of 16 elements accumulates ~16 roundings of 6e-8, so 1e-5
// relative (plus 1e-6 absolute for values near zero) leaves a wide margin yet catches any formula error.
constexpr double kRtol = 1e-5, kAtol = 1e-6;

TEST(RmsNorm, ForwardAndBackwardMatchPyTorch) {
  Fixture f("kernels/testdata/rmsnorm.npz");
  const int64_t N = 6, C = 16;
  auto x = f.F("x", N * C), w = f.F("weight", C), dout = f.F("dout", N * C);
  std::vector<float> out(N * C), rstd(N), dx(N * C), dw(C, 1.0f);
  Context ctx = Context::Cpu();
  RmsNormForwardParams p;
  p.N = N, p.C = C, p.eps = f.Scalar("eps"), p.x = x.data(), p.weight = w.data(), p.out = out.data(),
  p.rstd = rstd.data();
  RmsNormForward(ctx, p);
  EXPECT_TRUE(AllClose("out", out, f.F("out"), kRtol, kAtol));
  RmsNormBackwardParams b;
  b.N = N, b.C = C, b.x = x.data(), b.weight = w.data(), b.rstd = rstd.data(), b.dout = dout.data(),
  b.dx = dx.data(), b.dweight = dw.data();
  RmsNormBackward(ctx, b);
  EXPECT_TRUE(AllClose("dx", dx, f.F("dx"), kRtol, kAtol));
  std::vector<float> want_dw = f.F("dweight");
  for (auto& v : want_dw) v += 1.0f;  // dweight started at 1: it accumulates
  EXPECT_TRUE(AllClose("dweight (accumulated onto 1)", dw, want_dw, kRtol, kAtol));
}

TEST(RmsNorm, BackwardMatchesCentralDifferences) {
  const int64_t N = 4, C = 24;
  auto x = testing::RandomNormal(N * C, 1), w = testing::RandomNormal(C, 2),
       r = testing::RandomNormal(N * C, 3);
  Context ctx = Context::Cpu();
  std::vector<float> out(N * C), rstd(N);
  auto loss = [&] {
    RmsNormForwardParams p;
    p.N = N, p.C = C, p.x = x.data(), p.weight = w.data(), p.out = out.data(), p.rstd = rstd.data();
    RmsNormForward(ctx, p);
    double s = 0;
    for (int64_t i = 0; i < N * C; ++i) s += static_cast<double>(out[i]) * r[i];
    return s;
  };
  loss();
  std::vector<float> dx(N * C), dw(C, 0.0f);
  RmsNormBackwardParams b;
  b.N = N, b.C = C, b.x = x.data(), b.weight = w.data(), b.rstd = rstd.data(), b.dout = r.data(),
  b.dx = dx.data(), b.dweight = dw.data();
  RmsNormBackward(ctx, b);
  // fp32 forward, h = 1e-2: rounding noise ~1e-7 * |loss| / h ~ 1e-4 and truncation O(h^2) ~ 1e-4; a wrong
  // formula is off by O(1), so 1e-2 relative + 1e-3 absolute separates the two.
  EXPECT_TRUE(testing::CheckGradient("dx", x, loss, dx, 1e-2, 1e-2, 1e-3));
  EXPECT_TRUE(testing::CheckGradient("dweight", w, loss, dw, 1e-2, 1e-2, 1e-3));
}

TEST(RmsNorm, ThreadedResultMatchesSingleThread) {
  const int64_t N = 257, C = 384;
  auto x = testing::RandomNormal(N * C, 4), w = testing::RandomNormal(C, 5),
       dout = testing::RandomNormal(N * C, 6);
  ThreadPool one(1), two(2);
  std::vector<float> out1(N * C), out2(N * C), rstd(N), dx1(N * C), dx2(N * C), dw1(C, 0), dw2(C, 0);
  for (auto [pool, out, dx, dw] :
       {std::make_tuple(&one, &out1, &dx1, &dw1), std::make_tuple(&two, &out2, &dx2, &dw2)}) {
    Context ctx = Context::Cpu(pool);
    RmsNormForwardParams p;
    p.N = N, p.C = C, p.x = x.data(), p.weight = w.data(), p.out = out->data(), p.rstd = rstd.data();
    RmsNormForward(ctx, p);
    RmsNormBackwardParams b;
    b.N = N, b.C = C, b.x = x.data(), b.weight = w.data(), b.rstd = rstd.data(), b.dout = dout.data(),
    b.dx = dx->data(), b.dweight = dw->data();
    RmsNormBackward(ctx, b);
  }
  EXPECT_EQ(out1, out2);
  EXPECT_EQ(dx1, dx2);
  // The weight gradient sums N rows in per-thread partials: only the summation order differs.
  EXPECT_TRUE(AllClose("dweight", dw1, dw2, 1e-5, 1e-5));
}

TEST(RmsNorm, FusedResidualForwardEqualsResidualAddThenNorm) {
  const int64_t N = 9, C = 40;
  const Context ctx = Context::Cpu();
  const auto residual = testing::RandomNormal(N * C, 1), x = testing::RandomNormal(N * C, 2);
  const auto w = testing::RandomNormal(C, 3);
  std::vector<float> sum(N * C), out(N * C), rstd(N);
  ResidualForward(ctx, ResidualForwardParams{DType::kF32, N * C, residual.data(), x.data(), sum.data()});
  RmsNormForward(
      ctx, RmsNormForwardParams{DType::kF32, N, C, 1e-5f, sum.data(), w.data(), out.data(), rstd.data()});

  // In place (residual_out aliases residual), as the transformer block calls it: bitwise the unfused result.
  std::vector<float> stream = residual, fused_out(N * C), fused_rstd(N);
  ResidualRmsNormForwardParams p{
      DType::kF32,      N, C, 1e-5f, stream.data(), x.data(), stream.data(), w.data(), fused_out.data(),
      fused_rstd.data()};
  ResidualRmsNormForward(ctx, p);
  EXPECT_EQ(stream, sum);
  EXPECT_EQ(fused_out, out);
  EXPECT_EQ(fused_rstd, rstd);
}

}  // namespace
}  // namespace lmf::kernels
