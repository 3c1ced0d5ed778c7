// Tests of Scratch, the backward's temporaries: tensors taken between two Resets do not overlap, the same
// sequence of takes after a Reset reuses the memory (no allocation at a later step), and a request larger than
// every free buffer replaces them instead of piling up.
#include "model/layers/layer.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "kernels/core/allocator.h"

namespace lmf::model {
namespace {

TEST(Scratch, TakesDoNotOverlapAndAreReusedAfterReset) {
  Scratch scratch(&kernels::CpuAllocator::Default());
  const kernels::Tensor a = scratch.Take({4, 8}, kernels::DType::kF32);
  const kernels::Tensor b = scratch.Take({4, 8}, kernels::DType::kF32);
  const kernels::Tensor c = scratch.Take({3}, kernels::DType::kI32);
  const auto begin = [](const kernels::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()); };
  const auto end = [&](const kernels::Tensor& t) { return begin(t) + t.nbytes(); };
  for (const auto& [x, y] : {std::pair{&a, &b}, std::pair{&a, &c}, std::pair{&b, &c}}) {
    EXPECT_TRUE(end(*x) <= begin(*y) || end(*y) <= begin(*x));
  }
  EXPECT_EQ(a.dim(1), 8);
  EXPECT_EQ(c.dtype(), kernels::DType::kI32);
  const int64_t kept = scratch.bytes();
  scratch.Reset();
  const kernels::Tensor a2 = scratch.Take({4, 8}, kernels::DType::kF32);
  const kernels::Tensor b2 = scratch.Take({4, 8}, kernels::DType::kF32);
  const kernels::Tensor c2 = scratch.Take({3}, kernels::DType::kI32);
  EXPECT_EQ(scratch.bytes(), kept) << "the same takes after a Reset allocate nothing";
  EXPECT_NE(a2.data(), b2.data());
  EXPECT_NE(b2.data(), c2.data());
}

TEST(Scratch, ALargerRequestReplacesTheFreeBuffers) {
  Scratch scratch(&kernels::CpuAllocator::Default());
  for (int64_t rows : {1, 2, 4, 8, 16, 32}) {
    scratch.Reset();
    scratch.Take({rows, 64}, kernels::DType::kF32);
  }
  EXPECT_EQ(scratch.bytes(), 32 * 64 * 4) << "one buffer of the largest size, not one per size seen";
}

}  // namespace
}  // namespace lmf::model
