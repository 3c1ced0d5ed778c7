// A register-blocked fp32 GEMM for the small blocks inside fused CPU kernels (attention tiles), where a
// BLAS call would cost more than the work and would start its own threads:
//
//   C (m, n) = A (m, k) @ B (k, n)        (accumulate = false)
//   C (m, n) += A (m, k) @ B (k, n)       (accumulate = true)
//
// All row-major with explicit leading dimensions; no alignment needed. Tiles of 4 rows x 16 columns are
// kept in 8 AVX2 registers over the whole k loop (the unroll pragmas make sure of that at -O2) (2 loads, 4 broadcasts, 8 FMAs per k), with 8-column and
// scalar tails. Single-threaded: callers parallelise over their own blocks.
#ifndef LMFORGE_KERNELS_CPU_SMALL_GEMM_H_
#define LMFORGE_KERNELS_CPU_SMALL_GEMM_H_

#include <immintrin.h>

#include <cstdint>

namespace lmf::kernels::vec {

namespace internal {

// Rows [0, R) x columns [j, j + 8 * NV) of C.
template <int R, int NV>
inline void GemmTile(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                     bool accumulate) {
  __m256 acc[R][NV];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8 * v) : _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    __m256 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + p * ldb + 8 * v);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + p);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
}

template <int R>
inline void GemmRows(int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                     int64_t ldc, bool accumulate) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) GemmTile<R, 2>(k, a, lda, b + j, ldb, c + j, ldc, accumulate);
  for (; j + 8 <= n; j += 8) GemmTile<R, 1>(k, a, lda, b + j, ldb, c + j, ldc, accumulate);
  for (; j < n; ++j) {
    for (int r = 0; r < R; ++r) {
      float s = accumulate ? c[r * ldc + j] : 0.0f;
      for (int64_t p = 0; p < k; ++p) s += a[r * lda + p] * b[p * ldb + j];
      c[r * ldc + j] = s;
    }
  }
}

}  // namespace internal

inline void SmallGemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                      float* c, int64_t ldc, bool accumulate) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) internal::GemmRows<4>(n, k, a + i * lda, lda, b, ldb, c + i * ldc, ldc, accumulate);
  switch (m - i) {
    case 3: internal::GemmRows<3>(n, k, a + i * lda, lda, b, ldb, c + i * ldc, ldc, accumulate); break;
    case 2: internal::GemmRows<2>(n, k, a + i * lda, lda, b, ldb, c + i * ldc, ldc, accumulate); break;
    case 1: internal::GemmRows<1>(n, k, a + i * lda, lda, b, ldb, c + i * ldc, ldc, accumulate); break;
    default: break;
  }
}

// dst (cols, rows) = src (rows, cols)^T; src has leading dimension lds, dst has leading dimension ldd.
inline void Transpose(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

}  // namespace lmf::kernels::vec

#endif  // LMFORGE_KERNELS_CPU_SMALL_GEMM_H_
