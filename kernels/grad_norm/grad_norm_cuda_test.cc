// CUDA global gradient norm and clipping against the CPU kernel; the norm is bitwise reproducible. Tagged
// gpu: skips without a CUDA device (runs in the GPU bundle). Tolerances: fp32 |gpu - cpu| <= 1e-5 |cpu| +
// atol (atol per quantity, stated where it is not 1e-6); bf16 the STYLE.md rule of
// kernels/cuda/gpu_test_util.h with multiple 2.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/grad_norm/grad_norm.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::DeviceBuffer;
using testing::RoundTo;

class GradNormCudaTest : public testing::DTypeGpuTest {};

TEST_P(GradNormCudaTest, GlobalGradNormAndClippingMatchCpuAndAreDeterministic) {
  const std::vector<int64_t> sizes = {7, 100000, 16384, 33};
  std::vector<std::vector<float>> grads;
  std::vector<DeviceBuffer> bufs;
  std::vector<GradSpan> cpu_spans, gpu_spans;
  for (size_t i = 0; i < sizes.size(); ++i) {
    grads.push_back(RoundTo(RandomNormal(sizes[i], 200 + i), dt()));  // the same values on both sides
    bufs.emplace_back(grads.back(), dt());
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    cpu_spans.push_back(GradSpan{grads[i].data(), sizes[i]});
    gpu_spans.push_back(GradSpan{bufs[i].get(), sizes[i]});
  }
  const float ref = kernels::GlobalGradNorm(cpu_, GradNormParams{DType::kF32, cpu_spans.data(), 4});
  const GradNormParams gp{dt(), gpu_spans.data(), 4};
  absl::StatusOr<float> a = cuda::GlobalGradNorm(ctx(), gp);
  absl::StatusOr<float> b = cuda::GlobalGradNorm(ctx(), gp);
  ASSERT_TRUE(a.ok() && b.ok());
  // Both sum squares in fp32 within 16K chunks and in double across: relative difference ~1e-6.
  EXPECT_NEAR(*a, ref, 1e-5 * ref);
  EXPECT_EQ(*a, *b) << "grad norm differs between two identical runs";
  absl::StatusOr<float> pre = cuda::ClipGradNorm(ctx(), gp, 1.0f);
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(*pre, *a);
  absl::StatusOr<float> after = cuda::GlobalGradNorm(ctx(), gp);
  ASSERT_TRUE(after.ok());
  // After clipping to 1 the norm is 1 (bf16 rounding of the scaled values: 2^-8 relative).
  EXPECT_NEAR(*after, 1.0f, dt() == DType::kF32 ? 1e-5 : 4e-3);
}

INSTANTIATE_TEST_SUITE_P(DTypes, GradNormCudaTest, testing::GpuTestDTypes(), testing::DTypeTestName);

}  // namespace
}  // namespace lmf::kernels::cuda
