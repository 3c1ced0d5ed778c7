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
