// Embedding: the gather and the scatter-add backward (repeated ids add up; the table gradient
// accumulates) match PyTorch; threaded scatter equals single-threaded exactly.
#include "kernels/embedding/embedding.h"

#include "gtest/gtest.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;

TEST(Embedding, ForwardAndBackwardMatchPyTorch) {
  testing::Fixture f("kernels/testdata/embedding.npz");
  const int64_t N = 9, V = 11, C = 6;
  auto ids = f.I("ids", N);
  auto table = f.F("table", V * C), dout = f.F("dout", N * C);
  std::vector<float> out(N * C), dtable(V * C, 2.0f);
  Context ctx = Context::Cpu();
  EmbeddingForwardParams p{DType::kF32, N, V, C, ids.data(), table.data(), out.data()};
  EmbeddingForward(ctx, p);
  EXPECT_EQ(out, f.F("out")) << "a gather copies exactly";
  EmbeddingBackwardParams b{DType::kF32, N, V, C, ids.data(), dout.data(), dtable.data()};
  EmbeddingBackward(ctx, b);
  auto want = f.F("dtable");
  for (auto& v : want) v += 2.0f;
  // Row 3 sums three fp32 values: one rounding each, far below 1e-6.
  EXPECT_TRUE(AllClose("dtable (accumulated onto 2)", dtable, want, 1e-6, 1e-6));
}

TEST(Embedding, ThreadedScatterIsDeterministic) {
  const int64_t N = 4096, V = 50, C = 200;
  auto ids = testing::RandomInts(N, V, 7);
  auto dout = testing::RandomNormal(N * C, 8);
  ThreadPool one(1), two(2);
  std::vector<float> d1(V * C, 0), d2(V * C, 0);
  Context c1 = Context::Cpu(&one), c2 = Context::Cpu(&two);
  EmbeddingBackward(c1, {DType::kF32, N, V, C, ids.data(), dout.data(), d1.data()});
  EmbeddingBackward(c2, {DType::kF32, N, V, C, ids.data(), dout.data(), d2.data()});
  EXPECT_EQ(d1, d2);
}

TEST(EmbeddingDeathTest, OutOfRangeIdAborts) {
  std::vector<int32_t> ids = {0, 5};
  std::vector<float> table(4 * 2), out(2 * 2);
  Context ctx = Context::Cpu();
  EXPECT_DEATH(EmbeddingForward(ctx, {DType::kF32, 2, 4, 2, ids.data(), table.data(), out.data()}), "id 5");
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

TEST(EmbeddingBf16, GatherIsExactAndTheFp32TableGradientWithinTwiceTheNaiveBf16Error) {
  const int64_t N = 50, V = 13, C = 24;
  const auto table = RandomNormal(V * C, 1), dout = RandomNormal(N * C, 2);
  const auto ids = testing::RandomInts(N, static_cast<int32_t>(V), 3);
  auto run = [&](DType dt, bool round) {
    DTypeBuffer t(round ? RoundToBF16(table) : table, dt), d(round ? RoundToBF16(dout) : dout, dt), out(N * C, dt);
    std::vector<float> dtable(V * C, 0.25f);  // fp32, accumulates
    const Context ctx = Context::Cpu();
    EmbeddingForwardParams f;
    f.dtype = dt, f.N = N, f.V = V, f.C = C, f.ids = ids.data(), f.table = t.data(), f.out = out.data();
    EmbeddingForward(ctx, f);
    EmbeddingBackwardParams b;
    b.dtype = dt, b.N = N, b.V = V, b.C = C, b.ids = ids.data(), b.dout = d.data(), b.dtable = dtable.data();
    EmbeddingBackward(ctx, b);
    return std::make_pair(out.ToFloats(), dtable);
  };
  const auto ref = run(DType::kF32, false), naive = run(DType::kF32, true), bf16 = run(DType::kBF16, false);
  EXPECT_EQ(bf16.first, naive.first);  // a gather moves the rounded rows unchanged
  EXPECT_TRUE(WithinBf16Tolerance("dtable (fp32, +=)", bf16.second, ref.second, naive.second, 2));
}

}  // namespace
}  // namespace lmf::kernels
