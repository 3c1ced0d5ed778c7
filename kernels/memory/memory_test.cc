// kernels/memory on the CPU context: copies move the bytes (strided row copies only the rows' bytes),
// FillZero clears exactly the range asked for.
#include "kernels/memory/memory.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace lmf::kernels {
namespace {

TEST(MemoryTest, CopiesRoundTripOnTheCpuContext) {
  const Context ctx = Context::Cpu();
  const std::vector<float> host = {1.5f, -2.0f, 3.25f, 0.0f};
  std::vector<float> device(4, 9.0f), back(4, 7.0f);
  CopyToDevice(ctx, device.data(), host.data(), 4 * sizeof(float));
  std::vector<float> moved(4, 5.0f);
  CopyOnDevice(ctx, moved.data(), device.data(), 4 * sizeof(float));
  CopyToHost(ctx, back.data(), moved.data(), 4 * sizeof(float));
  Synchronize(ctx);
  EXPECT_EQ(back, host);
}

TEST(MemoryTest, FillZeroClearsOnlyTheRange) {
  const Context ctx = Context::Cpu();
  std::vector<int32_t> v = {1, 2, 3, 4, 5};
  FillZero(ctx, v.data() + 1, 3 * sizeof(int32_t));
  EXPECT_EQ(v, (std::vector<int32_t>{1, 0, 0, 0, 5}));
  FillZero(ctx, nullptr, 0);  // an empty range touches nothing
}

TEST(MemoryTest, CopyRowsMovesOnlyEachRowsBytes) {
  const Context ctx = Context::Cpu();
  // src: 3 rows of 5 ints; copy columns 1..2 of each into dst rows of pitch 4 ints.
  std::vector<int32_t> src(15), dst(12, -1);
  for (int i = 0; i < 15; ++i) src[i] = i;
  CopyRowsOnDevice(ctx, dst.data(), 4 * sizeof(int32_t), src.data() + 1, 5 * sizeof(int32_t),
                   2 * sizeof(int32_t), 3);
  EXPECT_EQ(dst, (std::vector<int32_t>{1, 2, -1, -1, 6, 7, -1, -1, 11, 12, -1, -1}));
  CopyRowsOnDevice(ctx, nullptr, 0, nullptr, 0, 0, 0);  // nothing to copy touches nothing
}

TEST(MemoryTest, CopyToHostAsFloatsWidensBf16Exactly) {
  const Context ctx = Context::Cpu();
  const std::vector<float> f32 = {1.5f, -2.0f, 3.0e-20f};
  std::vector<float> out(3, 0.0f);
  CopyToHostAsFloats(ctx, out.data(), f32.data(), DType::kF32, 3);
  EXPECT_EQ(out, f32);
  const std::vector<uint16_t> bf16 = {FloatToBF16(1.5f), FloatToBF16(-2.0f), FloatToBF16(0.1f)};
  CopyToHostAsFloats(ctx, out.data(), bf16.data(), DType::kBF16, 3);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.0f, BF16ToFloat(FloatToBF16(0.1f))}));
}

}  // namespace
}  // namespace lmf::kernels
