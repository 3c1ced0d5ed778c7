// Global gradient norm and clipping match torch.nn.utils.clip_grad_norm_ over three tensors (one spans
// two blocks); the norm does not depend on the thread count; gradients under the limit are unchanged.
#include "kernels/grad_norm/grad_norm.h"

#include "gtest/gtest.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/fixture.h"

namespace lmf::kernels {
namespace {

using testing::AllClose;

TEST(GradNorm, NormAndClippingMatchTorchClipGradNorm) {
  testing::Fixture f("kernels/testdata/grad_norm.npz");
  std::vector<std::vector<float>> grads;
  std::vector<GradSpan> spans;
  for (int i = 0; i < 3; ++i) grads.push_back(f.F("grad" + std::to_string(i)));
  for (auto& g : grads) spans.push_back({g.data(), static_cast<int64_t>(g.size())});
  GradNormParams p{DType::kF32, spans.data(), static_cast<int64_t>(spans.size())};
  Context ctx = Context::Cpu();
  const float norm = GlobalGradNorm(ctx, p);
  // Sum of 17K squares with fp32 blocks and a double total, against torch's fp32 norm: 1e-5 relative.
  EXPECT_NEAR(norm, f.Scalar("norm"), 1e-5 * f.Scalar("norm"));
  ASSERT_GT(norm, f.Scalar("max_norm")) << "the fixture must exercise clipping";
  const float returned = ClipGradNorm(ctx, p, f.Scalar("max_norm"));
  EXPECT_EQ(returned, norm);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(
        AllClose("clipped" + std::to_string(i), grads[i], f.F("clipped" + std::to_string(i)), 1e-5, 1e-9));
}

TEST(GradNorm, NormIsIndependentOfThreadCountAndSmallGradientsAreKept) {
  auto g = testing::RandomNormal(100000, 1, 1e-3f);
  GradSpan span{g.data(), static_cast<int64_t>(g.size())};
  GradNormParams p{DType::kF32, &span, 1};
  ThreadPool one(1), two(2);
  Context c1 = Context::Cpu(&one), c2 = Context::Cpu(&two);
  const float n1 = GlobalGradNorm(c1, p), n2 = GlobalGradNorm(c2, p);
  EXPECT_EQ(n1, n2);
  double want = 0;
  for (float v : g) want += double(v) * v;
  EXPECT_NEAR(n1, std::sqrt(want), 1e-5 * std::sqrt(want));
  auto before = g;
  ClipGradNorm(c2, p, 10.0f * n1);  // far above the norm: scale is exactly 1
  EXPECT_EQ(g, before);
  EXPECT_EQ(ClipScale(2.0f, 1.0f), 1.0f / (2.0f + 1e-6f));
}

TEST(GradNorm, ToDeviceWritesTheNormWhereTheContextKeepsData) {
  const Context ctx = Context::Cpu();
  auto a = testing::RandomNormal(100, 1), b = testing::RandomNormal(20000, 2);
  const GradSpan spans[] = {{a.data(), 100}, {b.data(), 20000}};
  const GradNormParams p{DType::kF32, spans, 2};
  float norm = -1.0f;
  GlobalGradNormToDevice(ctx, p, &norm);
  EXPECT_EQ(norm, GlobalGradNorm(ctx, p));
}

}  // namespace
}  // namespace lmf::kernels
