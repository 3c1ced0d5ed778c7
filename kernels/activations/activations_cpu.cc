// CPU activations: 8-lane AVX2 loops on vec.h's Sigmoid and GeluTanh (vec::Exp), with scalar tails from
// <cmath>; elements split over threads. The soft-cap c tanh(x / c) as c (2 s - 1) with s = sigmoid(2 x / c)
// (absolute error a few ulp of c; no cancellation for negative x) and its derivative as 4 s (1 - s).
#include <cmath>

#include "base/check.h"
#include "kernels/activations/activations.h"
#include "kernels/cpu/bf16.h"
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

// Applies vf to 8 lanes at a time and sf to the tail, over [begin, end).
template <typename VF, typename SF>
void Map(int64_t begin, int64_t end, VF vf, SF sf) {
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) vf(i);
  for (; i < end; ++i) sf(i);
}

using Use = F32Twin::Use;

// bf16 (x, out, dout, dx): the fp32 loops on fp32 twins (kernels/cpu/bf16.h).
void ActivationForwardBF16(const Context& ctx, const ActivationForwardParams& p) {
  const RowView all = RowView::Contiguous(p.n);
  const F32Twin x(ctx, p.dtype, p.x, all, Use::kInput), out(ctx, p.dtype, p.out, all, Use::kOutput);
  ActivationForwardParams f = p;
  f.dtype = DType::kF32;
  f.x = x.data(), f.out = out.data();
  cpu::ActivationForward(ctx, f);
  out.Store(ctx);
}

void ActivationBackwardBF16(const Context& ctx, const ActivationBackwardParams& p) {
  const RowView all = RowView::Contiguous(p.n);
  const F32Twin x(ctx, p.dtype, p.x, all, Use::kInput), dout(ctx, p.dtype, p.dout, all, Use::kInput);
  const F32Twin dx(ctx, p.dtype, p.dx, all, Use::kOutput);
  ActivationBackwardParams f = p;
  f.dtype = DType::kF32;
  f.x = x.data(), f.dout = dout.data(), f.dx = dx.data();
  cpu::ActivationBackward(ctx, f);
  dx.Store(ctx);
}

}  // namespace

void ActivationForward(const Context& ctx, const ActivationForwardParams& p) {
  if (p.dtype == DType::kBF16) return ActivationForwardBF16(ctx, p);
  LMF_CHECK(p.kind != Activation::kSoftCap || (p.cap > 0 && std::isfinite(p.cap)))
      << "activation softcap: cap=" << p.cap << " must be finite and > 0";
  const float* x = static_cast<const float*>(p.x);
  float* y = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.n, 16, [&](int64_t begin, int64_t end) {
    switch (p.kind) {
      case Activation::kGeluTanh:
        Map(
            begin, end, [&](int64_t i) { _mm256_storeu_ps(y + i, vec::GeluTanh(_mm256_loadu_ps(x + i))); },
            [&](int64_t i) { y[i] = vec::GeluTanh(x[i]); });
        break;
      case Activation::kSilu:
        Map(
            begin, end,
            [&](int64_t i) {
              const __m256 v = _mm256_loadu_ps(x + i);
              _mm256_storeu_ps(y + i, _mm256_mul_ps(v, vec::Sigmoid(v)));
            },
            [&](int64_t i) { y[i] = x[i] * vec::Sigmoid(x[i]); });
        break;
      case Activation::kRelu:
        Map(begin, end, [&](int64_t i) {
          _mm256_storeu_ps(y + i, _mm256_max_ps(_mm256_loadu_ps(x + i), _mm256_setzero_ps()));
        }, [&](int64_t i) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; });
        break;
      case Activation::kSoftCap: {  // c tanh(x / c) = c (2 sigmoid(2 x / c) - 1)
        const __m256 vc = _mm256_set1_ps(p.cap), two_inv = _mm256_set1_ps(2.0f / p.cap);
        const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
        Map(
            begin, end,
            [&](int64_t i) {
              const __m256 s = vec::Sigmoid(_mm256_mul_ps(_mm256_loadu_ps(x + i), two_inv));
              _mm256_storeu_ps(y + i, _mm256_mul_ps(vc, _mm256_fmsub_ps(two, s, one)));
            },
            [&](int64_t i) { y[i] = p.cap * (2.0f * vec::Sigmoid(2.0f * x[i] / p.cap) - 1.0f); });
        break;
      }
    }
  });
}

void ActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  if (p.dtype == DType::kBF16) return ActivationBackwardBF16(ctx, p);
  LMF_CHECK(p.kind != Activation::kSoftCap || (p.cap > 0 && std::isfinite(p.cap)))
      << "activation softcap: cap=" << p.cap << " must be finite and > 0";
  const float* x = static_cast<const float*>(p.x);
  const float* dy = static_cast<const float*>(p.dout);
  float* dx = static_cast<float*>(p.dx);
  const __m256 one = _mm256_set1_ps(1.0f);
  ParallelForItems(ctx, p.n, 20, [&](int64_t begin, int64_t end) {
    switch (p.kind) {
      case Activation::kGeluTanh:
        Map(
            begin, end,
            [&](int64_t i) {
              const __m256 grad = vec::GeluTanhGrad(_mm256_loadu_ps(x + i));
              _mm256_storeu_ps(dx + i, _mm256_mul_ps(grad, _mm256_loadu_ps(dy + i)));
            },
            [&](int64_t i) { dx[i] = dy[i] * vec::GeluTanhGrad(x[i]); });
        break;
      case Activation::kSilu:
        // d/dx = s (1 + x (1 - s)), s = sigmoid(x)
        Map(
            begin, end,
            [&](int64_t i) {
              const __m256 v = _mm256_loadu_ps(x + i);
              const __m256 s = vec::Sigmoid(v);
              const __m256 grad = _mm256_mul_ps(s, _mm256_fmadd_ps(v, _mm256_sub_ps(one, s), one));
              _mm256_storeu_ps(dx + i, _mm256_mul_ps(grad, _mm256_loadu_ps(dy + i)));
            },
            [&](int64_t i) {
              const float s = vec::Sigmoid(x[i]);
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
        const __m256 two_inv = _mm256_set1_ps(2.0f / p.cap), four = _mm256_set1_ps(4.0f);
        Map(
            begin, end,
            [&](int64_t i) {
              const __m256 s = vec::Sigmoid(_mm256_mul_ps(_mm256_loadu_ps(x + i), two_inv));
              const __m256 grad = _mm256_mul_ps(four, _mm256_mul_ps(s, _mm256_sub_ps(one, s)));
              _mm256_storeu_ps(dx + i, _mm256_mul_ps(grad, _mm256_loadu_ps(dy + i)));
            },
            [&](int64_t i) {
              const float s = vec::Sigmoid(2.0f * x[i] / p.cap);
              dx[i] = dy[i] * 4.0f * s * (1.0f - s);
            });
        break;
      }
    }
  });
}

}  // namespace cpu
}  // namespace lmf::kernels
