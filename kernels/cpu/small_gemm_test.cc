// SmallGemm and SmallGemmTransA equal a float64 triple loop for every combination of row/column tails and
// tile widths, with strided operands, both overwriting and accumulating, on the AVX2 tiles and (where the CPU
// has it) the AVX-512 tiles, which give bitwise the AVX2 tiles' results; Transpose moves every element.
#include "kernels/cpu/small_gemm.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace lmf::kernels::vec {
namespace {

// Both entry points: SmallGemm with A (m, k), SmallGemmTransA with A stored (k, m).
class SmallGemmTest : public ::testing::TestWithParam<bool> {};

// Runs f() with the AVX-512 forms on or off (isa.h), restoring the setting.
template <typename F>
void WithAvx512(bool on, F&& f) {
  const bool before = SetUseAvx512ForTesting(on);
  EXPECT_EQ(UseAvx512(), on);
  f();
  SetUseAvx512ForTesting(before);
}

// The ISAs this CPU can run: AVX2, and AVX-512 where it has it (elsewhere the tests below cover the AVX2
// tiles only).
std::vector<bool> Isas() {
  return CpuHasAvx512() ? std::vector<bool>{false, true} : std::vector<bool>{false};
}

TEST_P(SmallGemmTest, MatchesTripleLoopForAllTails) {
  for (const bool avx512 : Isas())
    WithAvx512(avx512, [&] {
      const bool trans_a = GetParam();
      std::mt19937 rng(3);
      std::normal_distribution<float> dist;
      // Rows: AVX2 takes 6-row tiles, then 4, then 3, 2 or 1 (7 = 6 + 1, 10 = 6 + 4, 15 = 6 + 6 + 3);
      // AVX-512 4-row tiles and the same tails.
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 9, 10, 15}) {
        // AVX-512 tiles of 64, 32 and 16 columns, then the 8-column and scalar tails (AVX2: 16, 8, scalar).
        for (int64_t n : {1, 7, 8, 9, 16, 17, 25, 32, 40, 56, 64, 79, 100, 127}) {
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
                      << "avx512=" << avx512 << " trans_a=" << trans_a << " m=" << m << " n=" << n
                      << " k=" << k << " acc=" << accumulate << " at " << i << "," << j;
                }
            }
          }
        }
      }
    });
}

// Each element of C is one FMA chain over k from the same start in both ISAs' tiles: bitwise equal.
TEST_P(SmallGemmTest, Avx512TilesGiveBitwiseTheAvx2Result) {
  if (!CpuHasAvx512()) GTEST_SKIP() << "this CPU has no AVX-512: only the AVX2 tiles can run";
  const bool trans_a = GetParam();
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  for (int64_t m : {1, 3, 4, 6, 10}) {
    for (int64_t n : {5, 8, 24, 48, 64, 88, 130}) {
      for (int64_t k : {1, 8, 64, 77}) {
        for (bool accumulate : {false, true}) {
          const int64_t lda = (trans_a ? m : k) + 1, ldb = n + 3, ldc = n + 2;
          std::vector<float> a((trans_a ? k : m) * lda), b(k * ldb), c0(m * ldc);
          for (auto& x : a) x = dist(rng);
          for (auto& x : b) x = dist(rng);
          for (auto& x : c0) x = dist(rng);
          std::vector<float> c[2] = {c0, c0};
          for (const bool avx512 : {false, true}) {
            WithAvx512(avx512, [&] {
              auto* gemm = trans_a ? SmallGemmTransA : SmallGemm;
              gemm(m, n, k, a.data(), lda, b.data(), ldb, c[avx512].data(), ldc, accumulate);
            });
          }
          ASSERT_EQ(c[0], c[1]) << "trans_a=" << trans_a << " m=" << m << " n=" << n << " k=" << k
                                << " acc=" << accumulate;
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
