// SmallGemm and SmallGemmTransA equal a float64 triple loop for every combination of row/column tails, with
// strided operands, both overwriting and accumulating; Transpose moves every element.
#include "kernels/cpu/small_gemm.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace lmf::kernels::vec {
namespace {

// Both entry points: SmallGemm with A (m, k), SmallGemmTransA with A stored (k, m).
class SmallGemmTest : public ::testing::TestWithParam<bool> {};

TEST_P(SmallGemmTest, MatchesTripleLoopForAllTails) {
  const bool trans_a = GetParam();
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  for (int64_t m : {1, 2, 3, 4, 5, 7, 9}) {
    for (int64_t n : {1, 7, 8, 9, 16, 17, 25, 40}) {
      for (int64_t k : {1, 5, 64}) {
        for (bool accumulate : {false, true}) {
          const int64_t lda = (trans_a ? m : k) + 3, ldb = n + 2, ldc = n + 5;
          std::vector<float> a((trans_a ? k : m) * lda), b(k * ldb), c(m * ldc);
          auto A = [&](int64_t i, int64_t p) { return trans_a ? a[p * lda + i] : a[i * lda + p]; };
          for (auto& x : a) x = dist(rng);
          for (auto& x : b) x = dist(rng);
          for (auto& x : c) x = dist(rng);
          std::vector<float> want = c;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = accumulate ? c[i * ldc + j] : 0.0;
              for (int64_t p = 0; p < k; ++p) s += double(A(i, p)) * b[p * ldb + j];
              want[i * ldc + j] = static_cast<float>(s);
            }
          if (trans_a) {
            SmallGemmTransA(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, accumulate);
          } else {
            SmallGemm(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, accumulate);
          }
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              // Inside C: k <= 64 fp32 FMAs of N(0,1) values, error well under 1e-4. Outside: untouched.
              ASSERT_NEAR(c[i * ldc + j], want[i * ldc + j], j < n ? 1e-4 : 0.0)
                  << "trans_a=" << trans_a << " m=" << m << " n=" << n << " k=" << k << " acc=" << accumulate
                  << " at " << i << "," << j;
            }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, SmallGemmTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "TransA" : "A";
                         });

TEST(SmallGemm, TransposeMovesEveryElement) {
  // Every combination of whole 8 x 8 blocks and edges, strided both sides; nothing outside dst's (cols, rows)
  // is written.
  for (int64_t rows : {1, 3, 8, 9, 16, 21}) {
    for (int64_t cols : {1, 5, 8, 13, 24}) {
      const int64_t lds = cols + 2, ldd = rows + 3;
      std::vector<float> src(rows * lds), dst(cols * ldd, -1.0f);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
      Transpose(rows, cols, src.data(), lds, dst.data(), ldd);
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = 0; r < ldd; ++r)
          ASSERT_EQ(dst[c * ldd + r], r < rows ? src[r * lds + c] : -1.0f)
              << "rows=" << rows << " cols=" << cols << " at " << c << "," << r;
    }
  }
}

}  // namespace
}  // namespace lmf::kernels::vec
