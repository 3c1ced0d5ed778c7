// Activations: SiLU, GELU (tanh), ReLU and the soft-cap forward and backward match PyTorch over [-9, 9] and
// random inputs (lengths not a multiple of 8, so the vector and scalar paths both run); the hand-written
// derivatives match central differences; threaded runs equal single-threaded ones.
#include "kernels/activations/activations.h"

#include "gtest/gtest.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;

constexpr Activation kAll[] = {Activation::kGeluTanh, Activation::kSilu, Activation::kRelu,
                               Activation::kSoftCap};
constexpr float kCap = 2.5f;  // the soft-cap's c (the fixture's softcap_cap); the other kinds ignore it

TEST(Activations, ForwardAndBackwardMatchPyTorch) {
  testing::Fixture f("kernels/testdata/activations.npz");
  auto x = f.F("x");
  const int64_t n = static_cast<int64_t>(x.size());
  Context ctx = Context::Cpu();
  for (Activation kind : kAll) {
    const std::string name = ActivationName(kind);
    auto dout = f.F(name + "_dout", n);
    std::vector<float> out(n), dx(n);
    ASSERT_EQ(f.Scalar("softcap_cap"), kCap);
    ActivationForward(ctx, {DType::kF32, kind, n, x.data(), out.data(), kCap});
    ActivationBackward(ctx, {DType::kF32, kind, n, x.data(), dout.data(), dx.data(), kCap});
    // The vector exp is within 2 ulp; tanh via 1 - 2/(e^2u + 1) loses relative accuracy only where
    // |tanh| is tiny, i.e. where 0.5 x (1 + tanh) is dominated by the exact 0.5 x term. 1e-5 relative
    // plus 1e-6 absolute (near the zeros of the outputs) covers both; the soft-cap c (2 s - 1) is within a
    // few ulp of c = 2.5 (~6e-7) absolute near its zero.
    EXPECT_TRUE(AllClose(name + " out", out, f.F(name + "_out"), 1e-5, 1e-6));
    EXPECT_TRUE(AllClose(name + " dx", dx, f.F(name + "_dx"), 1e-5, 1e-6));
  }
}

TEST(Activations, DerivativesMatchCentralDifferences) {
  // Away from ReLU's kink at 0 (the fixture test covers ReLU'(0) = 0 conventions).
  std::vector<float> x = testing::RandomNormal(37, 11, 2.0f);
  for (auto& v : x)
    if (std::abs(v) < 0.05f) v += 0.1f;
  auto r = testing::RandomNormal(37, 12);
  Context ctx = Context::Cpu();
  for (Activation kind : kAll) {
    std::vector<float> out(x.size()), dx(x.size());
    const int64_t n = static_cast<int64_t>(x.size());
    auto loss = [&] {
      ActivationForward(ctx, {DType::kF32, kind, n, x.data(), out.data(), kCap});
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += static_cast<double>(out[i]) * r[i];
      return s;
    };
    ActivationBackward(ctx, {DType::kF32, kind, n, x.data(), r.data(), dx.data(), kCap});
    // h = 1e-3 in fp32 on O(1) values: noise ~1e-4, truncation ~1e-6.
    EXPECT_TRUE(testing::CheckGradient(ActivationName(kind), x, loss, dx, 1e-3, 1e-2, 1e-3));
  }
}

TEST(Activations, ThreadedEqualsSingleThreaded) {
  const int64_t n = 1 << 18;
  auto x = testing::RandomNormal(n, 13, 3.0f);
  ThreadPool one(1), two(2);
  for (Activation kind : kAll) {
    std::vector<float> a(n), b(n);
    Context c1 = Context::Cpu(&one), c2 = Context::Cpu(&two);
    ActivationForward(c1, {DType::kF32, kind, n, x.data(), a.data(), kCap});
    ActivationForward(c2, {DType::kF32, kind, n, x.data(), b.data(), kCap});
    EXPECT_EQ(a, b) << ActivationName(kind);
  }
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

TEST(ActivationBf16, EveryKindWithinTwiceTheNaiveBf16Error) {
  const int64_t n = 1001;
  const auto x = RandomNormal(n, 1, 2.0f), dout = RandomNormal(n, 2);
  for (Activation kind : kAll) {
    auto run = [&](DType dt, bool round) {
      DTypeBuffer xb(round ? RoundToBF16(x) : x, dt), db(round ? RoundToBF16(dout) : dout, dt), out(n, dt),
          dx(n, dt);
      const Context ctx = Context::Cpu();
      ActivationForward(ctx, ActivationForwardParams{dt, kind, n, xb.data(), out.data(), kCap});
      ActivationBackward(ctx, ActivationBackwardParams{dt, kind, n, xb.data(), db.data(), dx.data(), kCap});
      return std::make_pair(out.ToFloats(), dx.ToFloats());
    };
    const auto ref = run(DType::kF32, false), naive = run(DType::kF32, true), bf16 = run(DType::kBF16, false);
    const std::string name = ActivationName(kind);
    EXPECT_TRUE(WithinBf16Tolerance(name + " out", bf16.first, ref.first, RoundToBF16(naive.first), 2));
    EXPECT_TRUE(WithinBf16Tolerance(name + " dx", bf16.second, ref.second, RoundToBF16(naive.second), 2));
  }
}

}  // namespace
}  // namespace lmf::kernels
