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

TEST(ResidualBf16, ForwardAndAccumulatingBackwardWithinTwiceTheNaiveBf16Error) {
  const int64_t n = 1000;
  const auto a = RandomNormal(n, 1), b = RandomNormal(n, 2), dout = RandomNormal(n, 3), da0 = RandomNormal(n, 4),
             db0 = RandomNormal(n, 5);
  auto run = [&](DType dt, bool round) {
    auto in = [&](const std::vector<float>& v) { return DTypeBuffer(round ? RoundToBF16(v) : v, dt); };
    DTypeBuffer ab = in(a), bb = in(b), db = in(dout), da_acc = in(da0), db_acc = in(db0), out(n, dt);
    const Context ctx = Context::Cpu();
    ResidualForward(ctx, ResidualForwardParams{dt, n, ab.data(), bb.data(), out.data()});
    ResidualBackward(ctx, ResidualBackwardParams{dt, n, db.data(), da_acc.data(), db_acc.data()});
    return std::vector<std::vector<float>>{out.ToFloats(), da_acc.ToFloats(), db_acc.ToFloats()};
  };
  const auto ref = run(DType::kF32, false), naive = run(DType::kF32, true), bf16 = run(DType::kBF16, false);
  const char* names[] = {"out", "da (+=)", "db (+=)"};
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(WithinBf16Tolerance(names[i], bf16[i], ref[i], RoundToBF16(naive[i]), 2));
}

}  // namespace
}  // namespace lmf::kernels
