// CPU activations: 8-lane AVX2 loops built on vec::Exp (tanh(u) = 1 - 2 / (exp(2u) + 1) and
// sigmoid(x) = 1 / (1 + exp(-x))), with scalar tails from <cmath>; elements split over threads.
#include <cmath>

#include "kernels/activations/activations.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"

namespace lmf::kernels {

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kSilu: return "silu";
    case Activation::kGeluTanh: return "gelu_tanh";
    case Activation::kRelu: return "relu";
  }
  return "?";
}

namespace cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

inline __m256 Tanh(__m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = vec::Exp(_mm256_add_ps(u, u));
  return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}
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
  const float* x = static_cast<const float*>(p.x);
  float* y = static_cast<float*>(p.out);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  ParallelForItems(ctx, p.n, 16, [&](int64_t begin, int64_t end) {
    switch (p.kind) {
      case Activation::kGeluTanh:
        Map(begin, end, [&](int64_t i) {
          const __m256 v = _mm256_loadu_ps(x + i);
          _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, Tanh(GeluInner(v)))));
        }, [&](int64_t i) {
          const float v = x[i];
          y[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
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
    }
  });
}

void ActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  const float* x = static_cast<const float*>(p.x);
  const float* dy = static_cast<const float*>(p.dout);
  float* dx = static_cast<float*>(p.dx);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  ParallelForItems(ctx, p.n, 20, [&](int64_t begin, int64_t end) {
    switch (p.kind) {
      case Activation::kGeluTanh:
        // d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
        Map(begin, end, [&](int64_t i) {
          const __m256 v = _mm256_loadu_ps(x + i);
          const __m256 t = Tanh(GeluInner(v));
          const __m256 dinner = _mm256_mul_ps(
              _mm256_set1_ps(kSqrt2OverPi),
              _mm256_fmadd_ps(_mm256_set1_ps(3.0f * kGeluCubic), _mm256_mul_ps(v, v), one));
          const __m256 sech2 = _mm256_fnmadd_ps(t, t, one);
          const __m256 grad = _mm256_fmadd_ps(_mm256_mul_ps(half, v), _mm256_mul_ps(sech2, dinner),
                                              _mm256_mul_ps(half, _mm256_add_ps(one, t)));
          _mm256_storeu_ps(dx + i, _mm256_mul_ps(grad, _mm256_loadu_ps(dy + i)));
        }, [&](int64_t i) {
          const float v = x[i];
          const float t = std::tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
          const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
          dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner);
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
    }
  });
}

}  // namespace cpu
}  // namespace lmf::kernels
