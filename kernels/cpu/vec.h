// Vectorised fp32 building blocks for the CPU kernels (AVX2 + FMA, which the default build targets with
// -march=x86-64-v3): dot products, axpy, sums, max, a vector exp, and the sigmoid and GELU built on it.
// Each has a tail for any n (scalar, or for ExpShiftSum masked vector lanes). Header-only so the loops
// inline into the kernels.
#ifndef LMFORGE_KERNELS_CPU_VEC_H_
#define LMFORGE_KERNELS_CPU_VEC_H_

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#if !defined(__AVX2__) || !defined(__FMA__)
#error "kernels/cpu/vec.h needs AVX2 and FMA (build with -march=x86-64-v3 or newer, as .bazelrc does)"
#endif

namespace lmf::kernels::vec {

inline float HorizontalSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 shuf = _mm_movehdup_ps(lo);
  __m128 sums = _mm_add_ps(lo, shuf);
  shuf = _mm_movehl_ps(shuf, sums);
  sums = _mm_add_ss(sums, shuf);
  return _mm_cvtss_f32(sums);
}

inline float HorizontalMax(__m256 v) {
  __m128 lo = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_max_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// sum_i a[i] * b[i]
inline float Dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y[i] += alpha * x[i]
inline void Axpy(float alpha, const float* x, float* y, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// x[i] *= alpha
inline void Scale(float alpha, float* x, int64_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(a, _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) x[i] *= alpha;
}

// y[i] += x[i]
inline void AddInto(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += x[i];
}

// sum_i x[i]
inline float Sum(const float* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + i));
  float s = HorizontalSum(acc);
  for (; i < n; ++i) s += x[i];
  return s;
}

// sum_i (x[i] - shift)^2
inline float SumSquaredDeviation(const float* x, float shift, int64_t n) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), s), d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), s);
    acc0 = _mm256_fmadd_ps(d0, d0, acc0);
    acc1 = _mm256_fmadd_ps(d1, d1, acc1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), s);
    acc0 = _mm256_fmadd_ps(d, d, acc0);
  }
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += (x[i] - shift) * (x[i] - shift);
  return sum;
}

// max_i x[i]; -inf for n == 0.
inline float Max(const float* x, int64_t n) {
  __m256 acc = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_max_ps(acc, _mm256_loadu_ps(x + i));
  float m = HorizontalMax(acc);
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// exp(x) for 8 lanes: range reduction x = k ln2 + r (|r| <= ln2/2, ln2 split in two parts), a degree-6
// polynomial for exp(r) (Cephes expf coefficients, about 1 ulp), and 2^k built in the exponent bits.
// Inputs below -87.3 give 0 (including -inf); above 88.376 (127.5 ln 2, where k reaches 128 and 2^k is
// built as +inf) give +inf, the last third of a unit before FLT_MAX's logarithm 88.72 included; NaN gives NaN.
inline __m256 Exp(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3365479f);
  const __m256 too_small = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  // max/min return their second operand when either is NaN: x last keeps a NaN (NaN in, NaN out).
  x = _mm256_min_ps(_mm256_set1_ps(88.7228394f), _mm256_max_ps(lo, x));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^k for k in [-126, 128]: k + 127 in the exponent field; k = 128 gives the all-ones exponent, +inf.
  const __m256 two_k = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
  return _mm256_blendv_ps(_mm256_mul_ps(p, two_k), _mm256_setzero_ps(), too_small);
}

// Lanes [0, r) set (all ones), for the masked loads and stores of an r-element tail (0 <= r <= 8).
inline __m256i TailMask(int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

namespace internal {
// ExpShiftSum and its padded form: the same loop, the tail read and written through masks or whole.
template <bool kPadded>
inline float ExpShiftSum(const float* x, float shift, float* out, int64_t n) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(out + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    const __m256 in = kPadded ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, mask);
    const __m256 e = _mm256_and_ps(Exp(_mm256_sub_ps(in, s)), _mm256_castsi256_ps(mask));
    if (kPadded) {
      _mm256_storeu_ps(out + i, e);
    } else {
      _mm256_maskstore_ps(out + i, mask, e);
    }
    acc = _mm256_add_ps(acc, e);
  }
  return HorizontalSum(acc);
}
}  // namespace internal

// out[i] = exp(x[i] - shift); returns sum_i out[i]. out may alias x. A tail of n % 8 elements goes through
// the same vector Exp (masked loads and stores), so every element is computed alike wherever it lies.
inline float ExpShiftSum(const float* x, float shift, float* out, int64_t n) {
  return internal::ExpShiftSum<false>(x, shift, out, n);
}

// Where ExpShiftSumPadded stops reading and writing a row of n: n rounded up to 8.
inline int64_t PaddedEnd(int64_t n) { return (n + 7) / 8 * 8; }

// ExpShiftSum for rows with room past n: x may be read and out written up to PaddedEnd(n), and out gets 0
// in [n, PaddedEnd(n)). The tail is read and written whole instead of through masked loads and stores, which
// cannot take their data from a store still in flight (the rows of attention's scores, written just before):
// the same values and sum as ExpShiftSum, bit for bit, without the stall.
inline float ExpShiftSumPadded(const float* x, float shift, float* out, int64_t n) {
  return internal::ExpShiftSum<true>(x, shift, out, n);
}

// sum_i exp(x[i] - shift), without storing the exponentials.
inline float SumExpShift(const float* x, float shift, int64_t n) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_add_ps(acc0, Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
    acc1 = _mm256_add_ps(acc1, Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), s)));
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_add_ps(acc0, Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += std::exp(x[i] - shift);
  return sum;
}

// The logistic sigmoid 1 / (1 + exp(-x)): 8 lanes through Exp, one through std::exp.
inline __m256 Sigmoid(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, Exp(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}
inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// GELU, tanh approximation (torch.nn.functional.gelu(approximate="tanh")): x 0.5 (1 + tanh(u)) =
// x sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3) (the sigmoid avoids the cancellation of 1 + tanh(u)
// for negative x), and its derivative s + 2 x s (1 - s) u'(x) (1 - tanh^2 = 4 s (1 - s), s = sigmoid(2u),
// u'(x) = sqrt(2/pi) (1 + 3 * 0.044715 x^2)).
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
inline __m256 GeluSigmoid(__m256 x) {  // sigmoid(2u)
  const __m256 u = _mm256_mul_ps(
      _mm256_set1_ps(kSqrt2OverPi),
      _mm256_mul_ps(x,
                    _mm256_fmadd_ps(_mm256_set1_ps(kGeluCubic), _mm256_mul_ps(x, x), _mm256_set1_ps(1.0f))));
  return Sigmoid(_mm256_add_ps(u, u));
}
inline float GeluSigmoid(float x) { return Sigmoid(2.0f * kSqrt2OverPi * (x + kGeluCubic * x * x * x)); }
inline __m256 GeluTanh(__m256 x) { return _mm256_mul_ps(x, GeluSigmoid(x)); }
inline float GeluTanh(float x) { return x * GeluSigmoid(x); }
inline __m256 GeluTanhGrad(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f), s = GeluSigmoid(x);
  const __m256 du =
      _mm256_mul_ps(_mm256_set1_ps(kSqrt2OverPi),
                    _mm256_fmadd_ps(_mm256_set1_ps(3.0f * kGeluCubic), _mm256_mul_ps(x, x), one));
  const __m256 two_x_s_1ms = _mm256_mul_ps(_mm256_add_ps(x, x), _mm256_mul_ps(s, _mm256_sub_ps(one, s)));
  return _mm256_fmadd_ps(two_x_s_1ms, du, s);
}
inline float GeluTanhGrad(float x) {
  const float s = GeluSigmoid(x);
  return s + 2.0f * x * s * (1.0f - s) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}

}  // namespace lmf::kernels::vec

#endif  // LMFORGE_KERNELS_CPU_VEC_H_
