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

// bf16 storage (kernels/cpu/bf16.h): against the fp32 kernel on the unrounded inputs, each bf16 output is
// within 2x the error of the naive bf16 computation (the fp32 kernel on bf16-rounded inputs, its outputs
// rounded once; STYLE.md, the CUDA tests' rule). The CPU computes exactly that in fp32, so the bound leaves
// room only for a tie rounding the other way; a wrong operand dtype, stride or write rule breaks it.
// fp32 statistics and parameter gradients are held to the same rule unrounded.
namespace lmf::kernels {
namespace {

using testing::DTypeBuffer;
using testing::RandomNormal;
using testing::RoundToBF16;
using testing::WithinBf16Tolerance;

struct NormResult {
  std::vector<float> sum, out, rstd, dx, dw;
};

NormResult RunRmsNorm(DType dt, const std::vector<float>& res, const std::vector<float>& x,
                      const std::vector<float>& w, const std::vector<float>& dout, int64_t N, int64_t C) {
  const Context ctx = Context::Cpu();
  DTypeBuffer rb(res, dt), xb(x, dt), wb(w, dt), db(dout, dt), sum(N * C, dt), out(N * C, dt), dx(N * C, dt);
  NormResult r;
  r.rstd.resize(N);
  r.dw.assign(C, 0.5f);  // accumulates
  ResidualRmsNormForwardParams f;
  f.dtype = dt, f.N = N, f.C = C, f.residual = rb.data(), f.x = xb.data(), f.residual_out = sum.data();
  f.weight = wb.data(), f.out = out.data(), f.rstd = r.rstd.data();
  ResidualRmsNormForward(ctx, f);
  RmsNormBackwardParams b;
  b.dtype = dt, b.N = N, b.C = C, b.x = sum.data(), b.weight = wb.data(), b.rstd = r.rstd.data();
  b.dout = db.data(), b.dx = dx.data(), b.dweight = r.dw.data();
  RmsNormBackward(ctx, b);
  r.sum = sum.ToFloats(), r.out = out.ToFloats(), r.dx = dx.ToFloats();
  return r;
}

TEST(RmsNormBf16, FusedForwardAndBackwardWithinTwiceTheNaiveBf16Error) {
  const int64_t N = 37, C = 96;
  const auto res = RandomNormal(N * C, 1), x = RandomNormal(N * C, 2), w = RandomNormal(C, 3, 0.5f),
             dout = RandomNormal(N * C, 4);
  const NormResult ref = RunRmsNorm(DType::kF32, res, x, w, dout, N, C);
  const NormResult naive =
      RunRmsNorm(DType::kF32, RoundToBF16(res), RoundToBF16(x), RoundToBF16(w), RoundToBF16(dout), N, C);
  // The naive computation stores the sum in bf16 before normalising it, as the bf16 kernel does.
  const NormResult naive_stored =
      RunRmsNorm(DType::kF32, RoundToBF16(naive.sum), std::vector<float>(N * C, 0.0f), RoundToBF16(w),
                 RoundToBF16(dout), N, C);
  const NormResult bf16 = RunRmsNorm(DType::kBF16, res, x, w, dout, N, C);
  EXPECT_TRUE(WithinBf16Tolerance("residual_out", bf16.sum, ref.sum, RoundToBF16(naive.sum), 2));
  EXPECT_TRUE(WithinBf16Tolerance("out", bf16.out, ref.out, RoundToBF16(naive_stored.out), 2));
  EXPECT_TRUE(WithinBf16Tolerance("rstd (fp32)", bf16.rstd, ref.rstd, naive_stored.rstd, 2));
  EXPECT_TRUE(WithinBf16Tolerance("dx", bf16.dx, ref.dx, RoundToBF16(naive_stored.dx), 2));
  EXPECT_TRUE(WithinBf16Tolerance("dweight (fp32, += onto 0.5)", bf16.dw, ref.dw, naive_stored.dw, 2));
}

}  // namespace
}  // namespace lmf::kernels
