// kernels/memory on a CUDA context through the device-generic entry points (tag gpu: skips without a
// device): bytes survive host -> device -> device -> host, strided row copies move only the rows' bytes, and
// FillZero clears exactly the range asked for.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/memory/memory.h"

namespace lmf::kernels::cuda {
namespace {

class MemoryCudaTest : public testing::GpuTest {};

TEST_F(MemoryCudaTest, CopiesRoundTripThroughTheDevice) {
  const Context c = ctx();
  ASSERT_TRUE(c.device.is_cuda());
  const std::vector<float> host = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f, 65504.0f};
  const size_t bytes = host.size() * sizeof(float);
  testing::DeviceBuffer a(static_cast<int64_t>(host.size()), DType::kF32);
  testing::DeviceBuffer b(static_cast<int64_t>(host.size()), DType::kF32);
  kernels::CopyToDevice(c, a.get(), host.data(), bytes);
  kernels::CopyOnDevice(c, b.get(), a.get(), bytes);
  std::vector<float> back(host.size(), 9.0f);
  kernels::CopyToHost(c, back.data(), b.get(), bytes);
  EXPECT_EQ(back, host);
  kernels::Synchronize(c);
}

TEST_F(MemoryCudaTest, FillZeroClearsOnlyTheRange) {
  const Context c = ctx();
  const std::vector<int32_t> host = {1, 2, 3, 4, 5};
  testing::DeviceBuffer d = testing::DeviceBuffer::Ints(host);
  kernels::FillZero(c, d.as<int32_t>() + 1, 3 * sizeof(int32_t));
  kernels::FillZero(c, nullptr, 0);  // an empty range touches nothing
  std::vector<int32_t> back(host.size(), -1);
  kernels::CopyToHost(c, back.data(), d.get(), back.size() * sizeof(int32_t));
  EXPECT_EQ(back, (std::vector<int32_t>{1, 0, 0, 0, 5}));
}

TEST_F(MemoryCudaTest, CopyRowsMovesOnlyEachRowsBytes) {
  const Context c = ctx();
  std::vector<int32_t> src(15);
  for (int i = 0; i < 15; ++i) src[i] = i;
  testing::DeviceBuffer s = testing::DeviceBuffer::Ints(src);
  testing::DeviceBuffer d = testing::DeviceBuffer::Ints(std::vector<int32_t>(12, -1));
  // Columns 1..2 of 3 rows of pitch 5 into rows of pitch 4.
  kernels::CopyRowsOnDevice(c, d.get(), 4 * sizeof(int32_t), s.as<int32_t>() + 1, 5 * sizeof(int32_t),
                            2 * sizeof(int32_t), 3);
  std::vector<int32_t> back(12, 0);
  kernels::CopyToHost(c, back.data(), d.get(), back.size() * sizeof(int32_t));
  EXPECT_EQ(back, (std::vector<int32_t>{1, 2, -1, -1, 6, 7, -1, -1, 11, 12, -1, -1}));
  EXPECT_FALSE(cuda::CopyRowsOnDevice(c, d.get(), 4, s.get(), 20, 8, 3).ok());  // row wider than dst's pitch
}

}  // namespace
}  // namespace lmf::kernels::cuda
