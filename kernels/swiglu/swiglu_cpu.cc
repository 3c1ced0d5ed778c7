// CPU SwiGLU gating: rows split over threads, 8 lanes at a time with a vec::Exp sigmoid.
//   out = silu(g) u;  dg = dout u s (1 + g (1 - s));  du = dout silu(g)   (s = sigmoid(g))
#include <cmath>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/swiglu/swiglu.h"

namespace lmf::kernels::cpu {
namespace {

inline __m256 Sigmoid(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, vec::Exp(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

}  // namespace

void SwiGluForward(const Context& ctx, const SwiGluForwardParams& p) {
  const int64_t gs = p.gate_stride ? p.gate_stride : p.H, us = p.up_stride ? p.up_stride : p.H;
  const float* gate = static_cast<const float*>(p.gate);
  const float* up = static_cast<const float*>(p.up);
  float* out = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.N, 20 * p.H, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* g = gate + n * gs;
      const float* u = up + n * us;
      float* y = out + n * p.H;
      int64_t h = 0;
      for (; h + 8 <= p.H; h += 8) {
        const __m256 gv = _mm256_loadu_ps(g + h);
        _mm256_storeu_ps(y + h, _mm256_mul_ps(_mm256_mul_ps(gv, Sigmoid(gv)), _mm256_loadu_ps(u + h)));
      }
      for (; h < p.H; ++h) y[h] = g[h] / (1.0f + std::exp(-g[h])) * u[h];
    }
  });
}

void SwiGluBackward(const Context& ctx, const SwiGluBackwardParams& p) {
  const int64_t gs = p.gate_stride ? p.gate_stride : p.H, us = p.up_stride ? p.up_stride : p.H;
  const float* gate = static_cast<const float*>(p.gate);
  const float* up = static_cast<const float*>(p.up);
  const float* dout = static_cast<const float*>(p.dout);
  float* dgate = static_cast<float*>(p.dgate);
  float* dup = static_cast<float*>(p.dup);
  const __m256 one = _mm256_set1_ps(1.0f);
  ParallelForItems(ctx, p.N, 24 * p.H, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* g = gate + n * gs;
      const float* u = up + n * us;
      const float* dy = dout + n * p.H;
      float* dg = dgate + n * gs;
      float* du = dup + n * us;
      int64_t h = 0;
      for (; h + 8 <= p.H; h += 8) {
        const __m256 gv = _mm256_loadu_ps(g + h), uv = _mm256_loadu_ps(u + h), dv = _mm256_loadu_ps(dy + h);
        const __m256 s = Sigmoid(gv);
        const __m256 dsilu = _mm256_mul_ps(s, _mm256_fmadd_ps(gv, _mm256_sub_ps(one, s), one));
        _mm256_storeu_ps(dg + h, _mm256_mul_ps(_mm256_mul_ps(dv, uv), dsilu));
        _mm256_storeu_ps(du + h, _mm256_mul_ps(dv, _mm256_mul_ps(gv, s)));
      }
      for (; h < p.H; ++h) {
        const float s = 1.0f / (1.0f + std::exp(-g[h]));
        const float gv = g[h], uv = u[h];
        dg[h] = dy[h] * uv * s * (1.0f + gv * (1.0f - s));
        du[h] = dy[h] * gv * s;
      }
    }
  });
}

}  // namespace lmf::kernels::cpu
