// SmallGemm equals a float64 triple loop for every combination of row/column tails, with strided
// operands, both overwriting and accumulating; Transpose moves every element.
#include "kernels/cpu/small_gemm.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace lmf::kernels::vec {
namespace {

TEST(SmallGemm, MatchesTripleLoopForAllTails) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  for (int64_t m : {1, 2, 3, 4, 5, 7, 9}) {
    for (int64_t n : {1, 7, 8, 9, 16, 17, 25, 40}) {
      for (int64_t k : {1, 5, 64}) {
        for (bool accumulate : {false, true}) {
          const int64_t lda = k + 3, ldb = n + 2, ldc = n + 5;
          std::vector<float> a(m * lda), b(k * ldb), c(m * ldc);
          for (auto& x : a) x = dist(rng);
          for (auto& x : b) x = dist(rng);
          for (auto& x : c) x = dist(rng);
          std::vector<float> want = c;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = accumulate ? c[i * ldc + j] : 0.0;
              for (int64_t p = 0; p < k; ++p) s += double(a[i * lda + p]) * b[p * ldb + j];
              want[i * ldc + j] = static_cast<float>(s);
            }
          SmallGemm(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, accumulate);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              // Inside C: k <= 64 fp32 FMAs of N(0,1) values, error well under 1e-4. Outside: untouched.
              ASSERT_NEAR(c[i * ldc + j], want[i * ldc + j], j < n ? 1e-4 : 0.0)
                  << "m=" << m << " n=" << n << " k=" << k << " acc=" << accumulate << " at " << i << "," << j;
            }
        }
      }
    }
  }
}

TEST(SmallGemm, TransposeMovesEveryElement) {
  std::vector<float> src(3 * 5), dst(5 * 4, -1.0f);
  for (int i = 0; i < 15; ++i) src[i] = static_cast<float>(i);
  Transpose(3, 5, src.data(), 5, dst.data(), 4);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(dst[c * 4 + r], src[r * 5 + c]);
  EXPECT_EQ(dst[3], -1.0f);
}

}  // namespace
}  // namespace lmf::kernels::vec
