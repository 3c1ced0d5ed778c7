// A register-blocked fp32 GEMM for the small blocks inside fused CPU kernels (attention tiles), where a
// BLAS call would cost more than the work and would start its own threads:
//
//   C (m, n) = A (m, k) @ B (k, n)        (accumulate = false)
//   C (m, n) += A (m, k) @ B (k, n)       (accumulate = true)
//
// and SmallGemmTransA, the same with A^T for A stored (k, m) (attention's P^T dO and dS^T Q without a
// transposed copy). All row-major with explicit leading dimensions; no alignment needed. Tiles of 6 rows x 16
// columns are kept in 12 AVX2 registers over the whole k loop (the unroll pragmas make sure of that at -O2) (2
// loads, 6 broadcasts, 12 FMAs per k: 12 independent chains, where 4 x 16's 8 left the FMA units waiting on
// their latency; ~10% faster attention forward on one thread here), then 4-row tiles and row tails, each with
// 8-column and scalar tails. Where the CPU has AVX-512 (isa.h),
// tiles of 4 rows x 64, 32 and 16 columns in 512-bit registers come first (at 64: 4 loads, 4 broadcasts, 16
// FMAs per k); every element of C is the same FMA chain over k either way, so C is bitwise the same.
// Single-threaded: callers parallelise over their own blocks.
#ifndef LMFORGE_KERNELS_CPU_SMALL_GEMM_H_
#define LMFORGE_KERNELS_CPU_SMALL_GEMM_H_

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/isa.h"

namespace lmf::kernels::vec {

namespace internal {

// A's element (row r, depth p): a[r * lda + p], or a[p * lda + r] when A is stored transposed.
template <bool kTransA>
inline const float* AElement(const float* a, int64_t lda, int r, int64_t p) {
  return kTransA ? a + p * lda + r : a + r * lda + p;
}

// Rows [0, R) x columns [j, j + 8 * NV) of C.
template <int R, int NV, bool kTransA>
inline void GemmTile(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                     int64_t ldc, bool accumulate) {
  __m256 acc[R][NV];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8 * v) : _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    __m256 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + p * ldb + 8 * v);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(AElement<kTransA>(a, lda, r, p));
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
}

// Columns [j, n) (fewer than 8), element by element: the same code in both ISAs' forms.
template <int R, bool kTransA>
inline void GemmScalarColumns(int64_t j, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                              int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (; j < n; ++j) {
    for (int r = 0; r < R; ++r) {
      float s = accumulate ? c[r * ldc + j] : 0.0f;
      for (int64_t p = 0; p < k; ++p) s += *AElement<kTransA>(a, lda, r, p) * b[p * ldb + j];
      c[r * ldc + j] = s;
    }
  }
}

template <int R, bool kTransA>
inline void GemmRows(int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                     int64_t ldc, bool accumulate) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) GemmTile<R, 2, kTransA>(k, a, lda, b + j, ldb, c + j, ldc, accumulate);
  for (; j + 8 <= n; j += 8) GemmTile<R, 1, kTransA>(k, a, lda, b + j, ldb, c + j, ldc, accumulate);
  GemmScalarColumns<R, kTransA>(j, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

// The AVX-512 form of GemmTile: rows [0, R) x columns [j, j + 16 * NV), the same FMA chain per element.
template <int R, int NV, bool kTransA>
LMF_TARGET_AVX512 LMF_ALWAYS_INLINE void GemmTile512(int64_t k, const float* a, int64_t lda, const float* b,
                                                     int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  __m512 acc[R][NV];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + p * ldb + 16 * v);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(*AElement<kTransA>(a, lda, r, p));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

// GemmRows with 64-, 32- and 16-column AVX-512 tiles (at 64, 16 accumulators of the 32 registers), then the
// same 8-column and scalar tails.
template <int R, bool kTransA>
LMF_TARGET_AVX512 inline void GemmRows512(int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                                          int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) GemmTile512<R, 4, kTransA>(k, a, lda, b + j, ldb, c + j, ldc, accumulate);
  if (j + 32 <= n) {
    GemmTile512<R, 2, kTransA>(k, a, lda, b + j, ldb, c + j, ldc, accumulate);
    j += 32;
  }
  if (j + 16 <= n) {
    GemmTile512<R, 1, kTransA>(k, a, lda, b + j, ldb, c + j, ldc, accumulate);
    j += 16;
  }
  if (j + 8 <= n) {
    GemmTile<R, 1, kTransA>(k, a, lda, b + j, ldb, c + j, ldc, accumulate);
    j += 8;
  }
  GemmScalarColumns<R, kTransA>(j, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

template <bool kTransA, bool kAvx512>
inline void Gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                 float* c, int64_t ldc, bool accumulate) {
  // Rows i of C use A from row i (or, transposed, from column i).
  auto a_rows = [&](int64_t i) { return kTransA ? a + i : a + i * lda; };
  auto rows = [&](auto r, int64_t i) {
    constexpr int R = decltype(r)::value;
    if constexpr (kAvx512) {
      GemmRows512<R, kTransA>(n, k, a_rows(i), lda, b, ldb, c + i * ldc, ldc, accumulate);
    } else {
      GemmRows<R, kTransA>(n, k, a_rows(i), lda, b, ldb, c + i * ldc, ldc, accumulate);
    }
  };
  int64_t i = 0;
  if constexpr (!kAvx512) {
    // AVX2: 6 x 16 tiles, 12 accumulators (15 of the 16 ymm registers with the B loads and the broadcast),
    // enough independent FMA chains to cover the FMA's latency on both pipes; 4 x 16 leaves them idle.
    for (; i + 6 <= m; i += 6) rows(std::integral_constant<int, 6>(), i);
  }
  for (; i + 4 <= m; i += 4) rows(std::integral_constant<int, 4>(), i);
  switch (m - i) {
    case 3:
      rows(std::integral_constant<int, 3>(), i);
      break;
    case 2:
      rows(std::integral_constant<int, 2>(), i);
      break;
    case 1:
      rows(std::integral_constant<int, 1>(), i);
      break;
    default:
      break;
  }
}

}  // namespace internal

// Runs the AVX-512 tiles where UseAvx512() (kernels/cpu/isa.h); bitwise the same C either way.
inline void SmallGemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                      float* c, int64_t ldc, bool accumulate) {
  UseAvx512() ? internal::Gemm<false, true>(m, n, k, a, lda, b, ldb, c, ldc, accumulate)
              : internal::Gemm<false, false>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

// C (m, n) (+)= A^T B with A stored (k, m) row-major at leading dimension lda: a[p * lda + i] is A^T's (i,
// p).
inline void SmallGemmTransA(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                            int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  UseAvx512() ? internal::Gemm<true, true>(m, n, k, a, lda, b, ldb, c, ldc, accumulate)
              : internal::Gemm<true, false>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

namespace internal {

// dst (8, 8) = src (8, 8)^T, in registers.
inline void Transpose8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

}  // namespace internal

// dst (cols, rows) = src (rows, cols)^T; src has leading dimension lds, dst has leading dimension ldd.
// 8 x 8 blocks in registers, the edges element by element.
inline void Transpose(int64_t rows, int64_t cols, const float* src, int64_t lds, float* dst, int64_t ldd) {
  const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (int64_t r = 0; r < rows8; r += 8)
    for (int64_t c = 0; c < cols8; c += 8)
      internal::Transpose8x8(src + r * lds + c, lds, dst + c * ldd + r, ldd);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < rows8 ? cols8 : 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

}  // namespace lmf::kernels::vec

#endif  // LMFORGE_KERNELS_CPU_SMALL_GEMM_H_
