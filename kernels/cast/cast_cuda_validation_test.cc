// Argument checking of the CUDA cast, which runs on the host before any CUDA call: runs (and must pass) on
// machines without a GPU. Host pointers stand in for device memory and are never touched: every call here
// returns or aborts before a launch.
#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/cast/cast.h"

namespace lmf::kernels::cuda {
namespace {

Context FakeCudaContext() {
  Context ctx;
  ctx.device = Device::Cuda(0);
  return ctx;  // no stream, no allocator
}

TEST(CastCudaValidation, RefusesPairsOtherThanF32AndBf16) {
  float a[4] = {}, b[4] = {};
  const absl::Status s = cuda::Cast(FakeCudaContext(), CastParams{4, DType::kF32, DType::kF16, a, b});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "cast: converts f32 <-> bf16, not f32 -> f16");
}

TEST(CastCudaValidation, RefusesANegativeCountAndLaunchesNothingForZero) {
  float a[4] = {};
  uint16_t b[4] = {};
  EXPECT_EQ(cuda::Cast(FakeCudaContext(), CastParams{-1, DType::kF32, DType::kBF16, a, b}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(cuda::Cast(FakeCudaContext(), CastParams{0, DType::kF32, DType::kBF16, a, b}).ok());
}

TEST(CastCudaValidationDeathTest, EntryPointStopsUnsupportedCallsBeforeTheBackend) {
  float a[4] = {}, b[4] = {};
  EXPECT_DEATH(kernels::Cast(FakeCudaContext(), CastParams{4, DType::kF16, DType::kF32, a, b}),
               "no backend in this binary runs op 'cast' on cuda:0 with dtype f16");
  EXPECT_DEATH(kernels::Cast(FakeCudaContext(), CastParams{4, DType::kBF16, DType::kBF16, a, b}),
               "cast converts f32 <-> bf16, not bf16 -> bf16");
}

}  // namespace
}  // namespace lmf::kernels::cuda
