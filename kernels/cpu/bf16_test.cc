// The bf16 conversion loops give bitwise dtype.h's scalar conversions (round to nearest even, NaN kept,
// ties, overflow to inf, subnormals) at every length, and F32Twin moves strided and broadcast operands to
// packed fp32 and back, using dense fp32 operands in place.
#include "kernels/cpu/bf16.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "gtest/gtest.h"

namespace lmf::kernels::cpu {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(Bf16, NarrowIsBitwiseTheScalarRoundingForEveryKindOfValue) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.5f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                          FromBits(0x7f800001u),  // signalling NaN whose payload is all in the low half
                          FromBits(0xff800001u), FromBits(0x3f808000u),  // a tie, rounds down to even
                          FromBits(0x3f818000u),                         // a tie, rounds up to even
                          FromBits(0x7f7fffffu),                         // max float: rounds to inf
                          FromBits(0x00000001u), FromBits(0x807fffffu)};  // subnormals
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) x.push_back(FromBits(rng()));
  for (size_t n = 0; n <= x.size(); n += (n < 40 ? 1 : 97)) {
    std::vector<uint16_t> h(n, 0xdead);
    NarrowToBF16(x.data(), h.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(h[i], FloatToBF16(x[i])) << "n=" << n << " i=" << i << " x=" << x[i];
  }
  uint16_t nan_out;
  NarrowToBF16(&x[7], &nan_out, 1);
  EXPECT_TRUE(std::isnan(BF16ToFloat(nan_out)));
}

TEST(Bf16, WidenIsExactAtEveryLength) {
  std::mt19937 rng(3);
  std::vector<uint16_t> h(300);
  for (auto& v : h) v = static_cast<uint16_t>(rng());
  for (int64_t n = 0; n <= 300; n += 7) {
    std::vector<float> f(n);
    WidenBF16(h.data(), f.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &f[i], 4);
      ASSERT_EQ(bits, static_cast<uint32_t>(h[i]) << 16) << i;
    }
  }
}

TEST(Bf16, TwinsMoveStridedBroadcastAndDenseOperands) {
  ThreadPool pool(2);
  const Context ctx = Context::Cpu(&pool);
  // (2, 3, 5) rows of 5 with ld 8: a strided bf16 input; its twin is packed.
  const int64_t batch = 2, rows = 3, cols = 5, ld = 8, bstride = rows * ld;
  std::vector<uint16_t> src(batch * bstride);
  for (size_t i = 0; i < src.size(); ++i) src[i] = FloatToBF16(static_cast<float>(i) * 0.25f);
  const RowView view = RowView::Batched(batch, bstride, rows, cols, ld);
  F32Twin in(ctx, DType::kBF16, src.data(), view, F32Twin::Use::kInput);
  EXPECT_EQ(in.stride(0), rows * cols);
  EXPECT_EQ(in.stride(1), cols);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        EXPECT_EQ(in.data()[b * in.stride(0) + r * in.stride(1) + c], BF16ToFloat(src[b * bstride + r * ld + c]));
  // An output written through its twin reaches only the view's elements, rounded.
  std::vector<uint16_t> dst(src.size(), 0x7fc1);
  F32Twin out(ctx, DType::kBF16, dst.data(), view, F32Twin::Use::kOutput);
  for (int64_t i = 0; i < batch * rows * cols; ++i) out.data()[i] = 1.0f + static_cast<float>(i) / 3.0f;
  out.Store(ctx);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < ld; ++c) {
        const uint16_t got = dst[b * bstride + r * ld + c];
        if (c >= cols) {
          EXPECT_EQ(got, 0x7fc1) << "padding written";
        } else {
          EXPECT_EQ(got, FloatToBF16(1.0f + static_cast<float>((b * rows + r) * cols + c) / 3.0f));
        }
      }
  // A broadcast batch (stride 0) is read once and keeps stride 0.
  F32Twin shared(ctx, DType::kBF16, src.data(), RowView::Batched(4, 0, rows, cols, ld), F32Twin::Use::kInput);
  EXPECT_EQ(shared.stride(0), 0);
  EXPECT_EQ(shared.data()[1 * shared.stride(1) + 2], BF16ToFloat(src[ld + 2]));
  // Dense fp32 is used in place; strided fp32 is copied and stored back.
  std::vector<float> dense(12, 1.0f);
  F32Twin same(ctx, DType::kF32, dense.data(), RowView::Rows(3, 4, 4), F32Twin::Use::kAccumulate);
  EXPECT_EQ(same.data(), dense.data());
  std::vector<float> strided(12, 2.0f);
  F32Twin acc(ctx, DType::kF32, strided.data(), RowView::Rows(3, 2, 4), F32Twin::Use::kAccumulate);
  EXPECT_NE(acc.data(), strided.data());
  for (int i = 0; i < 6; ++i) acc.data()[i] += static_cast<float>(i);
  acc.Store(ctx);
  EXPECT_EQ(strided[0], 2.0f);
  EXPECT_EQ(strided[1], 3.0f);
  EXPECT_EQ(strided[2], 2.0f);  // outside the view
  EXPECT_EQ(strided[9], 7.0f);  // row 2, column 1: 2 + 5
}

}  // namespace
}  // namespace lmf::kernels::cpu
