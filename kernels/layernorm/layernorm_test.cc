// LayerNorm: forward and backward match PyTorch (float64 autograd on the same fp32 inputs); parameter
// gradients accumulate; the hand-written backward matches central differences; the no-bias form works.
#include "kernels/layernorm/layernorm.h"

#include "gtest/gtest.h"
#include "kernels/residual/residual.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;
using testing::Fixture;

// fp32 vs a float64 reference over rows of 16: see rmsnorm_test.cc for the margin argument. The input has
// mean ~3, so centring cancels about one digit: 2e-5 relative.
constexpr double kRtol = 2e-5, kAtol = 2e-6;

TEST(LayerNorm, ForwardAndBackwardMatchPyTorch) {
  Fixture f("kernels/testdata/layernorm.npz");
  const int64_t N = 6, C = 16;
  auto x = f.F("x", N * C), w = f.F("weight", C), bias = f.F("bias", C), dout = f.F("dout", N * C);
  std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C), dw(C, 0.5f), db(C, -1.0f);
  Context ctx = Context::Cpu();
  LayerNormForwardParams p;
  p.N = N, p.C = C, p.eps = f.Scalar("eps"), p.x = x.data(), p.weight = w.data(), p.bias = bias.data();
  p.out = out.data(), p.mean = mean.data(), p.rstd = rstd.data();
  LayerNormForward(ctx, p);
  EXPECT_TRUE(AllClose("out", out, f.F("out"), kRtol, kAtol));
  LayerNormBackwardParams b;
  b.N = N, b.C = C, b.x = x.data(), b.weight = w.data(), b.mean = mean.data(), b.rstd = rstd.data();
  b.dout = dout.data(), b.dx = dx.data(), b.dweight = dw.data(), b.dbias = db.data();
  LayerNormBackward(ctx, b);
  EXPECT_TRUE(AllClose("dx", dx, f.F("dx"), kRtol, kAtol));
  auto want_dw = f.F("dweight"), want_db = f.F("dbias");
  for (auto& v : want_dw) v += 0.5f;
  for (auto& v : want_db) v -= 1.0f;
  EXPECT_TRUE(AllClose("dweight (accumulated onto 0.5)", dw, want_dw, kRtol, kAtol));
  EXPECT_TRUE(AllClose("dbias (accumulated onto -1)", db, want_db, kRtol, kAtol));
}

TEST(LayerNorm, BackwardMatchesCentralDifferencesWithAndWithoutBias) {
  const int64_t N = 5, C = 20;
  auto x = testing::RandomNormal(N * C, 1), w = testing::RandomNormal(C, 2),
       bias = testing::RandomNormal(C, 3);
  auto r = testing::RandomNormal(N * C, 4);
  Context ctx = Context::Cpu();
  for (bool with_bias : {true, false}) {
    std::vector<float> out(N * C), mean(N), rstd(N);
    auto loss = [&] {
      LayerNormForwardParams p;
      p.N = N, p.C = C, p.x = x.data(), p.weight = w.data(), p.bias = with_bias ? bias.data() : nullptr;
      p.out = out.data(), p.mean = mean.data(), p.rstd = rstd.data();
      LayerNormForward(ctx, p);
      double s = 0;
      for (int64_t i = 0; i < N * C; ++i) s += static_cast<double>(out[i]) * r[i];
      return s;
    };
    loss();
    std::vector<float> dx(N * C), dw(C, 0.0f), db(C, 0.0f);
    LayerNormBackwardParams b;
    b.N = N, b.C = C, b.x = x.data(), b.weight = w.data(), b.mean = mean.data(), b.rstd = rstd.data();
    b.dout = r.data(), b.dx = dx.data(), b.dweight = dw.data(), b.dbias = with_bias ? db.data() : nullptr;
    LayerNormBackward(ctx, b);
    // Tolerances as in rmsnorm_test.cc (h = 1e-2 in fp32: noise ~1e-4, formula errors O(1)).
    EXPECT_TRUE(testing::CheckGradient("dx", x, loss, dx, 1e-2, 1e-2, 1e-3)) << "bias " << with_bias;
    EXPECT_TRUE(testing::CheckGradient("dweight", w, loss, dw, 1e-2, 1e-2, 1e-3)) << "bias " << with_bias;
    if (with_bias) {
      EXPECT_TRUE(testing::CheckGradient("dbias", bias, loss, db, 1e-2, 1e-2, 1e-3));
    }
  }
}

TEST(LayerNorm, FusedResidualForwardEqualsResidualAddThenNorm) {
  const int64_t N = 7, C = 33;
  const Context ctx = Context::Cpu();
  const auto residual = testing::RandomNormal(N * C, 4), x = testing::RandomNormal(N * C, 5);
  const auto w = testing::RandomNormal(C, 6), b = testing::RandomNormal(C, 7);
  std::vector<float> sum(N * C), out(N * C), mean(N), rstd(N);
  ResidualForward(ctx, ResidualForwardParams{DType::kF32, N * C, residual.data(), x.data(), sum.data()});
  LayerNormForward(ctx, LayerNormForwardParams{DType::kF32, N, C, 1e-5f, sum.data(), w.data(), b.data(),
                                               out.data(), mean.data(), rstd.data()});

  // Into a separate residual_out buffer: bitwise the unfused result.
  std::vector<float> fused_sum(N * C), fused_out(N * C), fused_mean(N), fused_rstd(N);
  ResidualLayerNormForwardParams p{DType::kF32,
                                   N,
                                   C,
                                   1e-5f,
                                   residual.data(),
                                   x.data(),
                                   fused_sum.data(),
                                   w.data(),
                                   b.data(),
                                   fused_out.data(),
                                   fused_mean.data(),
                                   fused_rstd.data()};
  ResidualLayerNormForward(ctx, p);
  EXPECT_EQ(fused_sum, sum);
  EXPECT_EQ(fused_out, out);
  EXPECT_EQ(fused_mean, mean);
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
  std::vector<float> sum, out, mean, rstd, dx, dw, db;
};

NormResult RunLayerNorm(DType dt, const std::vector<float>& res, const std::vector<float>& x,
                        const std::vector<float>& w, const std::vector<float>& bias, const std::vector<float>& dout,
                        int64_t N, int64_t C) {
  const Context ctx = Context::Cpu();
  DTypeBuffer rb(res, dt), xb(x, dt), wb(w, dt), bb(bias, dt), db(dout, dt), sum(N * C, dt), out(N * C, dt),
      dx(N * C, dt);
  NormResult r;
  r.mean.resize(N), r.rstd.resize(N);
  r.dw.assign(C, 0.5f), r.db.assign(C, -0.5f);  // accumulate
  ResidualLayerNormForwardParams f;
  f.dtype = dt, f.N = N, f.C = C, f.residual = rb.data(), f.x = xb.data(), f.residual_out = sum.data();
  f.weight = wb.data(), f.bias = bb.data(), f.out = out.data(), f.mean = r.mean.data(), f.rstd = r.rstd.data();
  ResidualLayerNormForward(ctx, f);
  LayerNormBackwardParams b;
  b.dtype = dt, b.N = N, b.C = C, b.x = sum.data(), b.weight = wb.data(), b.mean = r.mean.data();
  b.rstd = r.rstd.data(), b.dout = db.data(), b.dx = dx.data(), b.dweight = r.dw.data(), b.dbias = r.db.data();
  LayerNormBackward(ctx, b);
  r.sum = sum.ToFloats(), r.out = out.ToFloats(), r.dx = dx.ToFloats();
  return r;
}

TEST(LayerNormBf16, FusedForwardAndBackwardWithinTwiceTheNaiveBf16Error) {
  const int64_t N = 29, C = 80;
  const auto res = RandomNormal(N * C, 1), x = RandomNormal(N * C, 2), w = RandomNormal(C, 3, 0.5f),
             bias = RandomNormal(C, 5, 0.2f), dout = RandomNormal(N * C, 4);
  const NormResult ref = RunLayerNorm(DType::kF32, res, x, w, bias, dout, N, C);
  const NormResult naive = RunLayerNorm(DType::kF32, RoundToBF16(res), RoundToBF16(x), RoundToBF16(w),
                                        RoundToBF16(bias), RoundToBF16(dout), N, C);
  // The naive computation stores the sum in bf16 before normalising it, as the bf16 kernel does.
  const NormResult naive_stored =
      RunLayerNorm(DType::kF32, RoundToBF16(naive.sum), std::vector<float>(N * C, 0.0f), RoundToBF16(w),
                   RoundToBF16(bias), RoundToBF16(dout), N, C);
  const NormResult bf16 = RunLayerNorm(DType::kBF16, res, x, w, bias, dout, N, C);
  EXPECT_TRUE(WithinBf16Tolerance("residual_out", bf16.sum, ref.sum, RoundToBF16(naive.sum), 2));
  EXPECT_TRUE(WithinBf16Tolerance("out", bf16.out, ref.out, RoundToBF16(naive_stored.out), 2));
  EXPECT_TRUE(WithinBf16Tolerance("mean (fp32)", bf16.mean, ref.mean, naive_stored.mean, 2));
  EXPECT_TRUE(WithinBf16Tolerance("rstd (fp32)", bf16.rstd, ref.rstd, naive_stored.rstd, 2));
  EXPECT_TRUE(WithinBf16Tolerance("dx", bf16.dx, ref.dx, RoundToBF16(naive_stored.dx), 2));
  EXPECT_TRUE(WithinBf16Tolerance("dweight (fp32, +=)", bf16.dw, ref.dw, naive_stored.dw, 2));
  EXPECT_TRUE(WithinBf16Tolerance("dbias (fp32, +=)", bf16.db, ref.db, naive_stored.db, 2));
}

}  // namespace
}  // namespace lmf::kernels
