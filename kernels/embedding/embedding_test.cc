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
