// Fused cross-entropy: per-row losses, lse and the mean-loss gradient (with z-loss, an ignored row and a
// padded vocabulary) match PyTorch, both as forward + backward and as the fused in-place forward, also on
// soft-capped logits (the gradient w.r.t. the uncapped ones); the gradients match central differences; a
// large vocabulary agrees between one and two threads.
#include "kernels/cross_entropy/cross_entropy.h"

#include <cmath>
#include <tuple>

#include "gtest/gtest.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;

// Sums of 13 exponentials (vec::Exp, 2 ulp) and a log, in fp32, against float64: 1e-5 relative; gradient
// entries down to ~1e-7 need the 1e-7 absolute part.
constexpr double kRtol = 1e-5, kAtol = 1e-7;

TEST(CrossEntropy, ForwardBackwardAndFusedMatchPyTorch) {
  testing::Fixture f("kernels/testdata/cross_entropy.npz");
  const int64_t N = 6, stride = 16;
  const int64_t V = static_cast<int64_t>(f.npz().Get("V").value()->ToInt64()[0]);
  auto logits = f.F("logits", N * stride);
  auto targets = f.I("targets", N);
  std::vector<float> losses(N), lse(N), dlogits(N * stride, 7.0f);
  Context ctx = Context::Cpu();
  CrossEntropyParams p;
  p.N = N, p.V = V, p.row_stride = stride, p.z_loss = f.Scalar("z_loss");
  p.logits = logits.data(), p.targets = targets.data(), p.losses = losses.data(), p.lse = lse.data();
  CrossEntropyForward(ctx, p);
  EXPECT_TRUE(AllClose("losses", losses, f.F("losses"), kRtol, kAtol));
  EXPECT_TRUE(AllClose("lse", lse, f.F("lse"), kRtol, kAtol));
  double mean = 0;
  for (float l : losses) mean += l;
  mean /= 5;  // one of the six rows is ignored
  EXPECT_NEAR(mean, f.Scalar("loss"), 1e-5 * std::abs(mean));
  p.dloss = f.Scalar("dloss");
  p.dlogits = dlogits.data();
  CrossEntropyBackward(ctx, p);
  EXPECT_TRUE(AllClose("dlogits (padding zeroed)", dlogits, f.F("dlogits"), kRtol, kAtol));

  // Fused and in place: the logits buffer becomes its gradient.
  std::vector<float> inplace = logits, losses2(N), lse2(N);
  p.logits = inplace.data(), p.dlogits = inplace.data(), p.losses = losses2.data(), p.lse = lse2.data();
  CrossEntropyForward(ctx, p);
  // The fused pass sums the exponentials in a different order: equal to a few ulp.
  EXPECT_TRUE(AllClose("fused losses", losses2, losses, 1e-6, 0));
  EXPECT_TRUE(AllClose("fused in-place dlogits", inplace, f.F("dlogits"), kRtol, kAtol));
}

TEST(CrossEntropy, SoftCappedLogitsMatchPyTorch) {
  testing::Fixture f("kernels/testdata/cross_entropy.npz");
  const int64_t N = 6, stride = 16;
  const int64_t V = static_cast<int64_t>(f.npz().Get("V").value()->ToInt64()[0]);
  auto capped = f.F("softcap_logits", N * stride);  // y = c tanh(z / c), by PyTorch
  auto targets = f.I("targets", N);
  std::vector<float> losses(N), lse(N), dlogits(N * stride, 7.0f);
  Context ctx = Context::Cpu();
  CrossEntropyParams p;
  p.N = N, p.V = V, p.row_stride = stride, p.z_loss = f.Scalar("z_loss"), p.softcap = f.Scalar("softcap");
  p.logits = capped.data(), p.targets = targets.data(), p.losses = losses.data(), p.lse = lse.data();
  CrossEntropyForward(ctx, p);
  EXPECT_TRUE(AllClose("softcap losses", losses, f.F("softcap_losses"), kRtol, kAtol));
  p.dloss = f.Scalar("dloss");
  p.dlogits = dlogits.data();
  CrossEntropyBackward(ctx, p);
  // The factor 1 - (y / c)^2 from fp32 y: a few ulp more than the plain gradient.
  EXPECT_TRUE(AllClose("softcap dlogits (w.r.t. z)", dlogits, f.F("softcap_dlogits"), kRtol, kAtol));
  // Fused and in place.
  std::vector<float> inplace = capped, losses2(N);
  p.logits = inplace.data(), p.dlogits = inplace.data(), p.losses = losses2.data();
  CrossEntropyForward(ctx, p);
  EXPECT_TRUE(AllClose("softcap fused losses", losses2, losses, 1e-6, 0));
  EXPECT_TRUE(AllClose("softcap fused in-place dlogits", inplace, f.F("softcap_dlogits"), kRtol, kAtol));
}

// loss(z) = sum_n dlosses[n] * CE(y)[n] with y = z, or y = c tanh(z / c) with a soft-cap c (the gradient is
// then w.r.t. z); the kernel's gradient against central differences of it. h = 1e-2 in fp32, losses of O(3):
// noise ~3e-7 * 3 / 1e-2 ~ 1e-4; formula errors (a missing z-loss or cap factor) are O(1).
void ExpectGradientMatchesCentralDifferences(int64_t N, int64_t V, float softcap, uint64_t seed) {
  auto z = testing::RandomNormal(N * V, seed, 2.0f);
  auto targets = testing::RandomInts(N, V, seed + 1);
  auto dlosses = testing::RandomNormal(N, seed + 2);
  Context ctx = Context::Cpu();
  std::vector<float> y(N * V), losses(N), lse(N), dz(N * V);
  CrossEntropyParams p;
  p.N = N, p.V = V, p.z_loss = 0.01f, p.softcap = softcap, p.targets = targets.data();
  p.losses = losses.data(), p.lse = lse.data(), p.logits = y.data();
  auto loss = [&] {
    for (int64_t i = 0; i < N * V; ++i) y[i] = softcap > 0 ? softcap * std::tanh(z[i] / softcap) : z[i];
    CrossEntropyParams q = p;
    q.dlogits = nullptr;
    CrossEntropyForward(ctx, q);
    double s = 0;
    for (int64_t n = 0; n < N; ++n) s += static_cast<double>(losses[n]) * dlosses[n];
    return s;
  };
  loss();
  p.dlosses = dlosses.data(), p.dlogits = dz.data();
  CrossEntropyBackward(ctx, p);
  EXPECT_TRUE(testing::CheckGradient("dlogits", z, loss, dz, 1e-2, 1e-2, 1e-3));
}

TEST(CrossEntropy, GradientMatchesCentralDifferences) {
  ExpectGradientMatchesCentralDifferences(3, 21, 0, 1);
}

// Rows of 37: the soft-cap's vector loop and its scalar tail.
TEST(CrossEntropy, SoftCapGradientMatchesCentralDifferences) {
  ExpectGradientMatchesCentralDifferences(3, 37, 1.5f, 6);
}

TEST(CrossEntropy, LargeVocabularyThreadedEqualsSingleThreaded) {
  const int64_t N = 64, V = 50257, stride = 50304;
  auto logits = testing::RandomNormal(N * stride, 4, 3.0f);
  auto targets = testing::RandomInts(N, V, 5);
  ThreadPool one(1), two(2);
  std::vector<float> l1(N), l2(N), s1(N), s2(N), g1(N * stride), g2(N * stride);
  for (auto [pool, losses, lse, grad] : {std::make_tuple(&one, &l1, &s1, &g1), std::make_tuple(&two, &l2, &s2, &g2)}) {
    CrossEntropyParams p;
    p.N = N, p.V = V, p.row_stride = stride, p.logits = logits.data(), p.targets = targets.data();
    p.losses = losses->data(), p.lse = lse->data(), p.dlogits = grad->data(), p.dloss = 1.0f / N;
    Context ctx = Context::Cpu(pool);
    CrossEntropyForward(ctx, p);
  }
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(g1, g2);
  // Each gradient row sums to ~0 (softmax minus one-hot), padding included.
  double row = 0;
  for (int64_t v = 0; v < stride; ++v) row += g1[v];
  EXPECT_NEAR(row, 0.0, 1e-6);
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

// Padded rows (row_stride > V), z-loss, an ignored row, and the fused forward writing the gradient over the
// logits in place.
TEST(CrossEntropyBf16, FusedInPlaceAndSeparateBackwardWithinTwiceTheNaiveBf16Error) {
  const int64_t N = 9, V = 70, stride = 80;
  const auto logits = RandomNormal(N * stride, 1, 3.0f);
  auto targets = testing::RandomInts(N, static_cast<int32_t>(V), 2);
  targets[4] = -100;
  auto run = [&](DType dt, bool round) {
    DTypeBuffer fused(round ? RoundToBF16(logits) : logits, dt), plain(round ? RoundToBF16(logits) : logits, dt),
        grad(N * stride, dt);
    std::vector<float> losses(N), lse(N), losses2(N), lse2(N);
    CrossEntropyParams p;
    p.dtype = dt, p.N = N, p.V = V, p.row_stride = stride, p.z_loss = 1e-3f, p.targets = targets.data();
    p.dloss = 1.0f / 8;
    p.logits = fused.data(), p.dlogits = fused.data(), p.losses = losses.data(), p.lse = lse.data();
    const Context ctx = Context::Cpu();
    CrossEntropyForward(ctx, p);
    p.logits = plain.data(), p.dlogits = nullptr, p.losses = losses2.data(), p.lse = lse2.data();
    CrossEntropyForward(ctx, p);
    p.dlogits = grad.data();
    CrossEntropyBackward(ctx, p);
    return std::vector<std::vector<float>>{losses, lse, fused.ToFloats(), losses2, grad.ToFloats()};
  };
  const auto ref = run(DType::kF32, false), naive = run(DType::kF32, true), bf16 = run(DType::kBF16, false);
  const char* names[] = {"losses (fp32)", "lse (fp32)", "fused dlogits", "losses (fp32)", "dlogits"};
  const bool rounded[] = {false, false, true, false, true};
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(
        WithinBf16Tolerance(names[i], bf16[i], ref[i], rounded[i] ? RoundToBF16(naive[i]) : naive[i], 2));
  }
}

}  // namespace
}  // namespace lmf::kernels
