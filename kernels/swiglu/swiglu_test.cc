// Gated linear units (SwiGLU, GeGLU): forward and backward match PyTorch; gate and up read from and written
// into one interleaved (N, 2H) buffer via row strides give the same results; gradients match central
// differences.
#include "kernels/swiglu/swiglu.h"

#include <string>

#include "gtest/gtest.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;

class GluTest : public ::testing::TestWithParam<Activation> {};

TEST_P(GluTest, ForwardAndBackwardMatchPyTorch) {
  testing::Fixture f("kernels/testdata/swiglu.npz");
  const std::string prefix = GetParam() == Activation::kSilu ? "" : "geglu_";  // the fixture's names
  const int64_t N = 5, H = 13;
  auto gate = f.F("gate", N * H), up = f.F("up", N * H), dout = f.F("dout", N * H);
  std::vector<float> out(N * H), dgate(N * H), dup(N * H);
  Context ctx = Context::Cpu();
  SwiGluForwardParams p;
  p.N = N, p.H = H, p.gate = gate.data(), p.up = up.data(), p.out = out.data(), p.activation = GetParam();
  SwiGluForward(ctx, p);
  SwiGluBackwardParams b;
  b.N = N, b.H = H, b.gate = gate.data(), b.up = up.data(), b.dout = dout.data(), b.dgate = dgate.data(), b.dup = dup.data();
  b.activation = GetParam();
  SwiGluBackward(ctx, b);
  // A few fp32 operations per element against float64: 1e-5 relative, 1e-6 absolute near zeros.
  EXPECT_TRUE(AllClose("out", out, f.F(prefix + "out"), 1e-5, 1e-6));
  EXPECT_TRUE(AllClose("dgate", dgate, f.F(prefix + "dgate"), 1e-5, 1e-6));
  EXPECT_TRUE(AllClose("dup", dup, f.F(prefix + "dup"), 1e-5, 1e-6));

  // The same computation on a fused (N, 2H) [gate | up] buffer.
  std::vector<float> fused(N * 2 * H), dfused(N * 2 * H), out2(N * H);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) fused[n * 2 * H + h] = gate[n * H + h], fused[n * 2 * H + H + h] = up[n * H + h];
  p.gate = fused.data(), p.up = fused.data() + H, p.gate_stride = p.up_stride = 2 * H, p.out = out2.data();
  SwiGluForward(ctx, p);
  EXPECT_EQ(out2, out);
  b.gate = fused.data(), b.up = fused.data() + H, b.gate_stride = b.up_stride = 2 * H;
  b.dgate = dfused.data(), b.dup = dfused.data() + H;
  SwiGluBackward(ctx, b);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      ASSERT_EQ(dfused[n * 2 * H + h], dgate[n * H + h]);
      ASSERT_EQ(dfused[n * 2 * H + H + h], dup[n * H + h]);
    }
}

TEST_P(GluTest, BackwardMatchesCentralDifferences) {
  const int64_t N = 3, H = 11;
  auto gate = testing::RandomNormal(N * H, 1, 2.0f), up = testing::RandomNormal(N * H, 2), r = testing::RandomNormal(N * H, 3);
  Context ctx = Context::Cpu();
  std::vector<float> out(N * H), dgate(N * H), dup(N * H);
  auto loss = [&] {
    SwiGluForwardParams p;
    p.N = N, p.H = H, p.gate = gate.data(), p.up = up.data(), p.out = out.data(), p.activation = GetParam();
    SwiGluForward(ctx, p);
    double s = 0;
    for (int64_t i = 0; i < N * H; ++i) s += static_cast<double>(out[i]) * r[i];
    return s;
  };
  SwiGluBackwardParams b;
  b.N = N, b.H = H, b.gate = gate.data(), b.up = up.data(), b.dout = r.data(), b.dgate = dgate.data(), b.dup = dup.data();
  b.activation = GetParam();
  SwiGluBackward(ctx, b);
  // h = 1e-3 in fp32: noise ~1e-4 relative; formula errors are O(1).
  EXPECT_TRUE(testing::CheckGradient("dgate", gate, loss, dgate, 1e-3, 1e-2, 1e-3));
  EXPECT_TRUE(testing::CheckGradient("dup", up, loss, dup, 1e-3, 1e-2, 1e-3));
}

INSTANTIATE_TEST_SUITE_P(Gates, GluTest, ::testing::Values(Activation::kSilu, Activation::kGeluTanh),
                         [](const ::testing::TestParamInfo<Activation>& info) {
                           return std::string(info.param == Activation::kSilu ? "SwiGLU" : "GeGLU");
                         });

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

// gate and up are the halves of one fused (N, 2H) buffer, as the model lays them out; so are their
// gradients, which must each reach only their own half.
TEST(SwiGluBf16, FusedHalvesWithinTwiceTheNaiveBf16Error) {
  const int64_t N = 21, H = 40;
  const auto gu = RandomNormal(N * 2 * H, 1, 1.5f), dout = RandomNormal(N * H, 2);
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    auto run = [&](DType dt, bool round) {
      DTypeBuffer g(round ? RoundToBF16(gu) : gu, dt), d(round ? RoundToBF16(dout) : dout, dt), out(N * H, dt),
          dg(N * 2 * H, dt);
      const size_t half = DTypeSize(dt) * H;
      char* gp = static_cast<char*>(g.data());
      char* dgp = static_cast<char*>(dg.data());
      const Context ctx = Context::Cpu();
      SwiGluForwardParams f;
      f.dtype = dt, f.N = N, f.H = H, f.gate = gp, f.gate_stride = 2 * H, f.up = gp + half, f.up_stride = 2 * H;
      f.out = out.data(), f.activation = act;
      SwiGluForward(ctx, f);
      SwiGluBackwardParams b;
      b.dtype = dt, b.N = N, b.H = H, b.gate = gp, b.gate_stride = 2 * H, b.up = gp + half, b.up_stride = 2 * H;
      b.dout = d.data(), b.dgate = dgp, b.dup = dgp + half, b.activation = act;
      SwiGluBackward(ctx, b);
      return std::make_pair(out.ToFloats(), dg.ToFloats());
    };
    const auto ref = run(DType::kF32, false), naive = run(DType::kF32, true), bf16 = run(DType::kBF16, false);
    EXPECT_TRUE(WithinBf16Tolerance("out", bf16.first, ref.first, RoundToBF16(naive.first), 2));
    EXPECT_TRUE(WithinBf16Tolerance("dgate|dup", bf16.second, ref.second, RoundToBF16(naive.second), 2));
  }
}

}  // namespace
}  // namespace lmf::kernels
