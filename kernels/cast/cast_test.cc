// The CPU cast against dtype.h's conversions, on the values where rounding rules differ: ties to even in
// both directions, the largest values that stay finite or round to infinity, subnormals, signed zeros,
// infinities and NaNs with payloads (which must stay NaN); and the entry point's refusals.
#include "kernels/cast/cast.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace lmf::kernels {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Floats whose bf16 rounding is easy to get wrong, with the expected bf16 bits.
struct Case {
  uint32_t f32_bits;
  uint16_t bf16_bits;
};
const Case kCases[] = {
    {0x3f800000u, 0x3f80u},  // 1.0 exact
    {0x3f808000u, 0x3f80u},  // tie, even below: stays
    {0x3f818000u, 0x3f82u},  // tie, odd below: rounds up to even
    {0x3f808001u, 0x3f81u},  // just above the tie: up
    {0x3f807fffu, 0x3f80u},  // just below the tie: down
    {0xbf818000u, 0xbf82u},  // negative tie, odd below: to even (up in magnitude)
    {0x7f7fffffu, 0x7f80u},  // FLT_MAX rounds to +inf
    {0x7f7f7fffu, 0x7f7fu},  // the largest float that stays finite below bf16's max
    {0x00000001u, 0x0000u},  // smallest subnormal rounds to +0
    {0x00408000u, 0x0040u},  // subnormal tie, even: stays
    {0x80000000u, 0x8000u},  // -0
    {0x7f800000u, 0x7f80u},  // +inf
    {0xff800000u, 0xff80u},  // -inf
    {0x7fc00000u, 0x7fc0u},  // canonical quiet NaN
    {0x7f800001u, 0x7fc0u},  // signalling NaN, payload only in the low bits: stays NaN (quiet bit set)
    {0xffa12345u, 0xffe1u},  // negative NaN keeps its sign and top payload bits
};

TEST(CastTest, FloatToBF16RoundsToNearestEvenAndKeepsNaN) {
  std::vector<float> src;
  for (const Case& c : kCases) src.push_back(FromBits(c.f32_bits));
  std::vector<uint16_t> dst(src.size(), 0xdeadu);
  Cast(Context::Cpu(),
       CastParams{static_cast<int64_t>(src.size()), DType::kF32, DType::kBF16, src.data(), dst.data()});
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(dst[i], kCases[i].bf16_bits) << "f32 bits 0x" << std::hex << kCases[i].f32_bits;
    EXPECT_EQ(dst[i], FloatToBF16(src[i])) << "f32 bits 0x" << std::hex << kCases[i].f32_bits;
  }
}

TEST(CastTest, BF16ToFloatIsExactForEveryBitPattern) {
  std::vector<uint16_t> src(1 << 16);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i);
  std::vector<float> dst(src.size());
  Cast(Context::Cpu(),
       CastParams{static_cast<int64_t>(src.size()), DType::kBF16, DType::kF32, src.data(), dst.data()});
  for (size_t i = 0; i < src.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &dst[i], 4);
    ASSERT_EQ(bits, static_cast<uint32_t>(i) << 16) << "bf16 bits " << i;
  }
}

// Large enough that the CPU splits it over threads (with a pool); every element matches FloatToBF16.
TEST(CastTest, LargeArraysMatchFloatToBF16Everywhere) {
  const int64_t n = 1000003;
  std::vector<float> src(n);
  for (int64_t i = 0; i < n; ++i)
    src[i] = std::ldexp(static_cast<float>(i % 9973) - 4986.5f, static_cast<int>(i % 61) - 30);
  std::vector<uint16_t> dst(n);
  std::vector<float> back(n);
  ThreadPool pool(4);
  const Context ctx = Context::Cpu(&pool);
  Cast(ctx, CastParams{n, DType::kF32, DType::kBF16, src.data(), dst.data()});
  Cast(ctx, CastParams{n, DType::kBF16, DType::kF32, dst.data(), back.data()});
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(dst[i], FloatToBF16(src[i])) << "element " << i;
    ASSERT_EQ(back[i], BF16ToFloat(dst[i])) << "element " << i;
  }
}

TEST(CastTest, ZeroElementsTouchesNothing) {
  Cast(Context::Cpu(), CastParams{0, DType::kF32, DType::kBF16, nullptr, nullptr});
}

TEST(CastDeathTest, UnsupportedPairsAbortNamingThem) {
  float a = 1.0f, b = 0.0f;
  EXPECT_DEATH(Cast(Context::Cpu(), CastParams{1, DType::kF32, DType::kF32, &a, &b}), "f32 -> f32");
  EXPECT_DEATH(Cast(Context::Cpu(), CastParams{1, DType::kF32, DType::kI32, &a, &b}), "cast");
}

}  // namespace
}  // namespace lmf::kernels
