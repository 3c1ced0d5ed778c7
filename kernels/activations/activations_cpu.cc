// CPU activations: 8-lane AVX2 loops built on vec::Exp, with scalar tails from <cmath>; elements split
// over threads. GELU uses 0.5 (1 + tanh(u)) = s = sigmoid(2u) and 1 - tanh(u)^2 = 4 s (1 - s), which
// avoid the cancellation of 1 + tanh(u) for negative inputs; the soft-cap c tanh(x / c) likewise as
// c (2 s - 1) with s = sigmoid(2 x / c) (absolute error a few ulp of c) and its derivative as 4 s (1 - s).
#include <cmath>

#include "base/check.h"
#include "kernels/activations/activations.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"

namespace lmf::kernels {

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kSilu: return "silu";
    case Activation::kGeluTanh: return "gelu_tanh";
    case Activation::kRelu: return "relu";
    case Activation::kSoftCap:
      return "softcap";
  }
  return "?";
}

namespace cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// 0.5 (1 + tanh(u)) = sigmoid(2u): the GELU below is written with it, so that 1 + tanh never cancels.
inline __m256 HalfOnePlusTanh(__m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, vec::Exp(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u))));
}
inline float HalfOnePlusTanhScalar(float u) { return 1.0f / (1.0f + std::exp(-2.0f * u)); }
inline __m256 Sigmoid(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, vec::Exp(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}
inline float SigmoidScalar(float x) { return 1.0f / (1.0f + std::exp(-x)); }

inline __m256 GeluInner(__m256 x) {  // sqrt(2/pi) (x + 0.044715 x^3)
  const __m256 x2 = _mm256_mul_ps(x, x);
  return _mm256_mul_ps(_mm256_set1_ps(kSqrt2OverPi),
                       _mm256_mul_ps(x, _mm256_fmadd_ps(_mm256_set1_ps(kGeluCubic), x2, _mm256_set1_ps(1.0f))));
}

// Applies vf to 8 lanes at a time and sf to the tail, over [begin, end).
template <typename VF, typename SF>
void Map(int64_t begin, int64_t end, VF vf, SF sf) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) vf(i);
  for (; i < end; ++i) sf(i);
}

}  // namespace

void ActivationForward(const Context& ctx, const ActivationForwardParams& p) {
  LMF_CHECK(p.kind != Activation::kSoftCap || (p.cap > 0 && std::isfinite(p.cap)))
      << "activation softcap: cap=" << p.cap << " must be finite and > 0";
  const float* x = static_cast<const float*>(p.x);
  float* y = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.n, 16, [&](int64_t begin, int64_t end) {
    switch (p.kind) {
      case Activation::kGeluTanh:
        Map(begin, end, [&](int64_t i) {
          const __m256 v = _mm256_loadu_ps(x + i);
          _mm256_storeu_ps(y + i, _mm256_mul_ps(v, HalfOnePlusTanh(GeluInner(v))));
        }, [&](int64_t i) {
          const float v = x[i];
          y[i] = v * HalfOnePlusTanhScalar(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
        });
        break;
      case Activation::kSilu:
        Map(begin, end, [&](int64_t i) {
          const __m256 v = _mm256_loadu_ps(x + i);
          _mm256_storeu_ps(y + i, _mm256_mul_ps(v, Sigmoid(v)));
        }, [&](int64_t i) { y[i] = x[i] * SigmoidScalar(x[i]); });
        break;
      case Activation::kRelu:
        Map(begin, end, [&](int64_t i) {
          _mm256_storeu_ps(y + i, _mm256_max_ps(_mm256_loadu_ps(x + i), _mm256_setzero_ps()));
        }, [&](int64_t i) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; });
        break;
      case Activation::kSoftCap: {  // c tanh(x / c) = c (2 sigmoid(2 x / c) - 1)
        const __m256 vc = _mm256_set1_ps(p.cap), inv = _mm256_set1_ps(1.0f / p.cap),
                     one = _mm256_set1_ps(1.0f);
        Map(
            begin, end,
            [&](int64_t i) {
              const __m256 s = HalfOnePlusTanh(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
              _mm256_storeu_ps(y + i, _mm256_mul_ps(vc, _mm256_fmsub_ps(_mm256_set1_ps(2.0f), s, one)));
            },
            [&](int64_t i) { y[i] = p.cap * (2.0f * HalfOnePlusTanhScalar(x[i] / p.cap) - 1.0f); });
        break;
      }
    }
  });
}

void ActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  LMF_CHECK(p.kind != Activation::kSoftCap || (p.cap > 0 && std::isfinite(p.cap)))
      << "activation softcap: cap=" << p.cap << " must be finite and > 0";
  const float* x = static_cast<const float*>(p.x);
  const float* dy = static_cast<const float*>(p.dout);
  float* dx = static_cast<float*>(p.dx);
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  ParallelForItems(ctx, p.n, 20, [&](int64_t begin, int64_t end) {
    switch (p.kind) {
      case Activation::kGeluTanh:
        // d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) u'(x) = s + 2 x s (1 - s) u'(x),
        // u'(x) = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
        Map(begin, end, [&](int64_t i) {
          const __m256 v = _mm256_loadu_ps(x + i);
          const __m256 s = HalfOnePlusTanh(GeluInner(v));
          const __m256 dinner = _mm256_mul_ps(
              _mm256_set1_ps(kSqrt2OverPi),
              _mm256_fmadd_ps(_mm256_set1_ps(3.0f * kGeluCubic), _mm256_mul_ps(v, v), one));
          const __m256 two_x_s_1ms = _mm256_mul_ps(_mm256_mul_ps(two, v), _mm256_mul_ps(s, _mm256_sub_ps(one, s)));
          const __m256 grad = _mm256_fmadd_ps(two_x_s_1ms, dinner, s);
          _mm256_storeu_ps(dx + i, _mm256_mul_ps(grad, _mm256_loadu_ps(dy + i)));
        }, [&](int64_t i) {
          const float v = x[i];
          const float s = HalfOnePlusTanhScalar(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
          const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
          dx[i] = dy[i] * (s + 2.0f * v * s * (1.0f - s) * dinner);
        });
        break;
      case Activation::kSilu:
        // d/dx = s (1 + x (1 - s)), s = sigmoid(x)
        Map(begin, end, [&](int64_t i) {
          const __m256 v = _mm256_loadu_ps(x + i);
          const __m256 s = Sigmoid(v);
          const __m256 grad = _mm256_mul_ps(s, _mm256_fmadd_ps(v, _mm256_sub_ps(one, s), one));
          _mm256_storeu_ps(dx + i, _mm256_mul_ps(grad, _mm256_loadu_ps(dy + i)));
        }, [&](int64_t i) {
          const float s = SigmoidScalar(x[i]);
          dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
        });
        break;
      case Activation::kRelu:
        Map(begin, end, [&](int64_t i) {
          const __m256 pos = _mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_setzero_ps(), _CMP_GT_OQ);
          _mm256_storeu_ps(dx + i, _mm256_and_ps(pos, _mm256_loadu_ps(dy + i)));
        }, [&](int64_t i) { dx[i] = x[i] > 0.0f ? dy[i] : 0.0f; });
        break;
      case Activation::kSoftCap: {  // d/dx c tanh(x / c) = 1 - tanh^2 = 4 s (1 - s), s = sigmoid(2 x / c)
        const __m256 inv = _mm256_set1_ps(1.0f / p.cap), four = _mm256_set1_ps(4.0f);
        Map(
            begin, end,
            [&](int64_t i) {
              const __m256 s = HalfOnePlusTanh(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
              const __m256 grad = _mm256_mul_ps(four, _mm256_mul_ps(s, _mm256_sub_ps(one, s)));
              _mm256_storeu_ps(dx + i, _mm256_mul_ps(grad, _mm256_loadu_ps(dy + i)));
            },
            [&](int64_t i) {
              const float s = HalfOnePlusTanhScalar(x[i] / p.cap);
              dx[i] = dy[i] * 4.0f * s * (1.0f - s);
            });
        break;
      }
    }
  });
}

}  // namespace cpu
}  // namespace lmf::kernels
