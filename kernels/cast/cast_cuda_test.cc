// CUDA cast against the CPU kernel, bit for bit (the conversion is exact integer work on both sides, so no
// tolerance): random normals at many scales plus the rounding corner cases (ties, overflow to infinity,
// subnormals, NaN payloads), on 16-byte-aligned buffers (the vector path) and on buffers one element off
// (the scalar path), with lengths that leave a tail. Tagged gpu: skips without a CUDA device.
#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cast/cast.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/testing/compare.h"

namespace lmf::kernels::cuda {
namespace {

using ::lmf::kernels::testing::RandomNormal;
using testing::DeviceBuffer;

class CastCudaTest : public testing::GpuTest {};

std::vector<float> Inputs(int64_t n) {
  std::vector<float> x = RandomNormal(n, 71);
  for (int64_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], static_cast<int>(i % 81) - 40);
  const uint32_t corners[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00000001u, 0x80000000u,
                              0x7f800000u, 0xff800000u, 0x7f800001u, 0xffa12345u, 0x7fc00000u};
  for (size_t k = 0; k < sizeof(corners) / sizeof(corners[0]) && static_cast<int64_t>(k) < n; ++k) {
    std::memcpy(&x[k * 7 % n], &corners[k], 4);
  }
  return x;
}

// Casts the n floats f32 -> bf16 -> f32 on the device with both pointers `offset` elements into their
// buffers, and compares both results bitwise with the CPU cast.
void CheckRoundTrip(const Context& ctx, int64_t n, int64_t offset) {
  SCOPED_TRACE(::testing::Message() << "n = " << n << ", offset = " << offset);
  std::vector<float> x(offset, 0.0f);
  const std::vector<float> inputs = Inputs(n);
  x.insert(x.end(), inputs.begin(), inputs.end());
  std::vector<uint16_t> want_bf16(n);
  std::vector<float> want_f32(n);
  const Context cpu = Context::Cpu();
  kernels::Cast(cpu, CastParams{n, DType::kF32, DType::kBF16, inputs.data(), want_bf16.data()});
  kernels::Cast(cpu, CastParams{n, DType::kBF16, DType::kF32, want_bf16.data(), want_f32.data()});

  DeviceBuffer src(x, DType::kF32), half(n + offset, DType::kBF16), back(n + offset, DType::kF32);
  ASSERT_TRUE(cuda::Cast(ctx, CastParams{n, DType::kF32, DType::kBF16, src.as<float>() + offset,
                                         half.as<uint16_t>() + offset})
                  .ok());
  ASSERT_TRUE(cuda::Cast(ctx, CastParams{n, DType::kBF16, DType::kF32, half.as<uint16_t>() + offset,
                                         back.as<float>() + offset})
                  .ok());
  const std::vector<uint8_t> half_bytes = half.Bytes(), back_bytes = back.Bytes();
  ASSERT_EQ(0, std::memcmp(half_bytes.data() + 2 * offset, want_bf16.data(), 2 * n)) << "f32 -> bf16";
  ASSERT_EQ(0, std::memcmp(back_bytes.data() + 4 * offset, want_f32.data(), 4 * n)) << "bf16 -> f32";
}

TEST_F(CastCudaTest, MatchesTheCpuBitForBitOnAlignedBuffers) {
  for (int64_t n : {1, 7, 8, 9, 1000, 1 << 20, (1 << 20) + 5}) CheckRoundTrip(ctx(), n, 0);
}

TEST_F(CastCudaTest, MatchesTheCpuBitForBitOnUnalignedBuffers) {
  for (int64_t n : {1, 9, 1003, 100001}) CheckRoundTrip(ctx(), n, 1);
}

TEST_F(CastCudaTest, RefusesPairsOtherThanF32AndBf16) {
  DeviceBuffer a(4, DType::kF32), b(4, DType::kF32);
  const absl::Status status = cuda::Cast(ctx(), CastParams{4, DType::kF32, DType::kF32, a.get(), b.get()});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("f32 -> f32"), absl::string_view::npos) << status.message();
}

}  // namespace
}  // namespace lmf::kernels::cuda
