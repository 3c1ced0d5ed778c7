// RoPE: forward and backward (the inverse rotation) match PyTorch for per-batch positions up to 4000;
// strided in-place use works; the CS336 RoPE snapshot matches at its tolerance.
#include "kernels/rope/rope.h"

#include "base/shared_data.h"
#include "gtest/gtest.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;

TEST(Rope, ForwardAndBackwardMatchPyTorch) {
  testing::Fixture f("kernels/testdata/rope.npz");
  const int64_t B = 2, T = 7, NH = 3, HS = 8;
  auto x = f.F("x", B * T * NH * HS), dout = f.F("dout", B * T * NH * HS);
  auto positions = f.I("positions", B * T);
  std::vector<float> out(x.size()), dx(x.size());
  Context ctx = Context::Cpu();
  RopeParams p = ContiguousRopeParams(B, T, NH, HS, f.Scalar("theta"), x.data(), out.data());
  p.positions = positions.data(), p.positions_stride_b = T;
  RopeForward(ctx, p);
  // Angles up to 4000 rad: computed in double and rounded once (cos/sin errors ~6e-8), then two fp32
  // products and a sum: 1e-5 relative, 1e-6 absolute where the pair nearly cancels.
  EXPECT_TRUE(AllClose("out", out, f.F("out"), 1e-5, 1e-6));
  p.in = dout.data(), p.out = dx.data();
  RopeBackward(ctx, p);
  EXPECT_TRUE(AllClose("dx", dx, f.F("dx"), 1e-5, 1e-6));
}

TEST(Rope, StridedInPlaceEqualsContiguous) {
  // q as the first NH*HS columns of a (B, T, 3 * NH * HS) qkv buffer, rotated in place.
  const int64_t B = 2, T = 5, NH = 2, HS = 6, W = 3 * NH * HS;
  auto qkv = testing::RandomNormal(B * T * W, 3);
  std::vector<float> q(B * T * NH * HS), want(q.size());
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t i = 0; i < NH * HS; ++i) q[bt * NH * HS + i] = qkv[bt * W + i];
  Context ctx = Context::Cpu();
  RopeForward(ctx, ContiguousRopeParams(B, T, NH, HS, 500.0f, q.data(), want.data()));
  RopeParams p;
  p.B = B, p.T = T, p.NH = NH, p.HS = HS, p.theta = 500.0f, p.in = qkv.data(), p.out = qkv.data();
  p.in_stride_b = p.out_stride_b = T * W, p.in_stride_t = p.out_stride_t = W, p.in_stride_h = p.out_stride_h = HS;
  RopeForward(ctx, p);
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t i = 0; i < NH * HS; ++i) ASSERT_EQ(qkv[bt * W + i], want[bt * NH * HS + i]) << bt << " " << i;
}

// The definition in double, for head sizes that use the 8-wide path, the pair-by-pair tail and both: every
// element within fp32 rounding of two products and a sum (|x| < 5: 1e-5 absolute).
TEST(Rope, MatchesTheDefinitionForEveryHeadSizeShape) {
  Context ctx = Context::Cpu();
  for (const int64_t HS : {2, 6, 8, 10, 16, 22}) {
    const int64_t B = 2, T = 9, NH = 3;
    auto x = testing::RandomNormal(B * T * NH * HS, 31);
    std::vector<float> out(x.size());
    RopeForward(ctx, ContiguousRopeParams(B, T, NH, HS, 500.0f, x.data(), out.data()));
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const double pos = static_cast<double>(bt % T);
      for (int64_t h = 0; h < NH; ++h) {
        for (int64_t i = 0; i < HS / 2; ++i) {
          const double angle = pos * std::pow(500.0, -2.0 * static_cast<double>(i) / static_cast<double>(HS));
          const int64_t at = (bt * NH + h) * HS + 2 * i;
          const double x0 = x[at], x1 = x[at + 1];
          ASSERT_NEAR(out[at], x0 * std::cos(angle) - x1 * std::sin(angle), 1e-5)
              << "HS " << HS << " at " << at;
          ASSERT_NEAR(out[at + 1], x0 * std::sin(angle) + x1 * std::cos(angle), 1e-5)
              << "HS " << HS << " at " << at;
        }
      }
    }
  }
}

TEST(Rope, MatchesCs336Snapshot) {
  LMF_SHARED_DATA_OR_SKIP(inputs_path, "cs336/derived/a1_test_inputs.npz");
  LMF_SHARED_DATA_OR_SKIP(snapshot_path, "cs336/assignment1-basics/tests/_snapshots/test_rope.npz");
  testing::Fixture inputs(inputs_path), snapshot(snapshot_path);
  const int64_t B = 4, T = 12, HS = 64;
  auto x = inputs.F("in_embeddings", B * T * HS);
  auto positions = inputs.I("pos_ids", T);
  std::vector<float> out(x.size());
  RopeParams p = ContiguousRopeParams(B, T, 1, HS, 10000.0f, x.data(), out.data());
  p.positions = positions.data(), p.positions_stride_b = 0;
  Context ctx = Context::Cpu();
  RopeForward(ctx, p);
  // The snapshot test's rule: assert_allclose(actual, expected, atol=1e-5) (rtol numpy's default 1e-7).
  EXPECT_TRUE(AllClose("cs336 rope", out, snapshot.F("array"), 1e-7, 1e-5));
}

}  // namespace
}  // namespace lmf::kernels

namespace lmf::kernels {
namespace {

TEST(RopeDeathTest, OddHeadSizeAborts) {
  std::vector<float> x(3);
  Context ctx = Context::Cpu();
  EXPECT_DEATH(RopeForward(ctx, ContiguousRopeParams(1, 1, 1, 3, 10000.0f, x.data(), x.data())), "odd");
}

}  // namespace
}  // namespace lmf::kernels

namespace lmf::kernels {
namespace {

TEST(Rope, BackwardMatchesCentralDifferences) {
  const int64_t B = 2, T = 5, NH = 2, HS = 10;  // one 8-wide step and a pair of tail
  auto x = testing::RandomNormal(B * T * NH * HS, 21), r = testing::RandomNormal(B * T * NH * HS, 22);
  std::vector<float> out(x.size()), dx(x.size());
  Context ctx = Context::Cpu();
  auto loss = [&] {
    RopeForward(ctx, ContiguousRopeParams(B, T, NH, HS, 100.0f, x.data(), out.data()));
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * r[i];
    return s;
  };
  RopeBackward(ctx, ContiguousRopeParams(B, T, NH, HS, 100.0f, r.data(), dx.data()));
  // The loss is linear in x, so central differences are exact up to fp32 rounding of the loss
  // (~1e-7 * |loss| / h with h = 1e-2): 1e-3 relative.
  EXPECT_TRUE(testing::CheckGradient("dx", x, loss, dx, 1e-2, 1e-3, 1e-4));
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

// q rotated in place inside a fused (B, T, 3, NH, HS) buffer: the strides skip k and v, which stay as they
// were; then the backward rotation.
TEST(RopeBf16, StridedInPlaceWithinTwiceTheNaiveBf16Error) {
  const int64_t B = 2, T = 11, NH = 3, HS = 16, row = 3 * NH * HS;
  const auto qkv = RandomNormal(B * T * row, 1);
  auto run = [&](DType dt, bool round) {
    DTypeBuffer buf(round ? RoundToBF16(qkv) : qkv, dt);
    RopeParams p;
    p.dtype = dt, p.B = B, p.T = T, p.NH = NH, p.HS = HS, p.in = buf.data(), p.out = buf.data();
    p.in_stride_b = p.out_stride_b = T * row, p.in_stride_t = p.out_stride_t = row;
    p.in_stride_h = p.out_stride_h = HS;
    RopeForward(Context::Cpu(), p);
    const std::vector<float> forward = buf.ToFloats();
    RopeBackward(Context::Cpu(), p);
    return std::make_pair(forward, buf.ToFloats());
  };
  const auto ref = run(DType::kF32, false), naive = run(DType::kF32, true), bf16 = run(DType::kBF16, false);
  EXPECT_TRUE(WithinBf16Tolerance("forward", bf16.first, ref.first, RoundToBF16(naive.first), 2));
  // The backward of the rounded forward: the naive reference rounds between the two rotations too.
  DTypeBuffer again(RoundToBF16(naive.first), DType::kF32);
  RopeParams p;
  p.B = B, p.T = T, p.NH = NH, p.HS = HS, p.in = again.data(), p.out = again.data();
  p.in_stride_b = p.out_stride_b = T * row, p.in_stride_t = p.out_stride_t = row, p.in_stride_h = p.out_stride_h = HS;
  RopeBackward(Context::Cpu(), p);
  EXPECT_TRUE(WithinBf16Tolerance("backward", bf16.second, ref.second, RoundToBF16(again.ToFloats()), 2));
  for (int64_t i = 0; i < B * T * row; ++i) {
    if ((i % row) < NH * HS) continue;  // k and v: untouched
    ASSERT_EQ(bf16.second[i], RoundToBF16({qkv[i]})[0]) << i;
  }
}

}  // namespace
}  // namespace lmf::kernels
