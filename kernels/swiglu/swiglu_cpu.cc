// CPU gated linear units: rows split over threads, 8 lanes at a time on vec.h's Sigmoid / GeluTanh.
//   SwiGLU: out = silu(g) u;  dg = dout u s (1 + g (1 - s));  du = dout silu(g)   (s = sigmoid(g))
//   GeGLU:  out = gelu(g) u;  dg = dout u gelu'(g);           du = dout gelu(g)   (tanh approximation)
#include <cmath>

#include "base/check.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/swiglu/swiglu.h"

namespace lmf::kernels::cpu {
namespace {

// The gate activation's value and derivative at g, 8 lanes or one.
template <Activation kAct>
struct Gate;
template <>
struct Gate<Activation::kSilu> {
  static __m256 Value(__m256 g) { return _mm256_mul_ps(g, vec::Sigmoid(g)); }
  static float Value(float g) { return g * vec::Sigmoid(g); }
  static void ValueAndGrad(__m256 g, __m256& value, __m256& grad) {
    const __m256 one = _mm256_set1_ps(1.0f), s = vec::Sigmoid(g);
    value = _mm256_mul_ps(g, s);
    grad = _mm256_mul_ps(s, _mm256_fmadd_ps(g, _mm256_sub_ps(one, s), one));
  }
  static void ValueAndGrad(float g, float& value, float& grad) {
    const float s = vec::Sigmoid(g);
    value = g * s;
    grad = s * (1.0f + g * (1.0f - s));
  }
};
template <>
struct Gate<Activation::kGeluTanh> {
  static __m256 Value(__m256 g) { return vec::GeluTanh(g); }
  static float Value(float g) { return vec::GeluTanh(g); }
  static void ValueAndGrad(__m256 g, __m256& value, __m256& grad) {
    value = vec::GeluTanh(g);
    grad = vec::GeluTanhGrad(g);
  }
  static void ValueAndGrad(float g, float& value, float& grad) {
    value = vec::GeluTanh(g);
    grad = vec::GeluTanhGrad(g);
  }
};

void CheckActivation(Activation a) {
  LMF_CHECK(a == Activation::kSilu || a == Activation::kGeluTanh)
      << "gated linear unit: the gate activation must be silu or gelu_tanh, not " << ActivationName(a);
}

template <Activation kAct>
void Forward(const Context& ctx, const SwiGluForwardParams& p) {
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
      for (; h + 8 <= p.H; h += 8)
        _mm256_storeu_ps(y + h,
                         _mm256_mul_ps(Gate<kAct>::Value(_mm256_loadu_ps(g + h)), _mm256_loadu_ps(u + h)));
      for (; h < p.H; ++h) y[h] = Gate<kAct>::Value(g[h]) * u[h];
    }
  });
}

template <Activation kAct>
void Backward(const Context& ctx, const SwiGluBackwardParams& p) {
  const int64_t gs = p.gate_stride ? p.gate_stride : p.H, us = p.up_stride ? p.up_stride : p.H;
  const float* gate = static_cast<const float*>(p.gate);
  const float* up = static_cast<const float*>(p.up);
  const float* dout = static_cast<const float*>(p.dout);
  float* dgate = static_cast<float*>(p.dgate);
  float* dup = static_cast<float*>(p.dup);
  ParallelForItems(ctx, p.N, 24 * p.H, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* g = gate + n * gs;
      const float* u = up + n * us;
      const float* dy = dout + n * p.H;
      float* dg = dgate + n * gs;
      float* du = dup + n * us;
      int64_t h = 0;
      for (; h + 8 <= p.H; h += 8) {
        const __m256 uv = _mm256_loadu_ps(u + h), dv = _mm256_loadu_ps(dy + h);
        __m256 value, grad;
        Gate<kAct>::ValueAndGrad(_mm256_loadu_ps(g + h), value, grad);
        _mm256_storeu_ps(dg + h, _mm256_mul_ps(_mm256_mul_ps(dv, uv), grad));
        _mm256_storeu_ps(du + h, _mm256_mul_ps(dv, value));
      }
      for (; h < p.H; ++h) {
        float value, grad;
        Gate<kAct>::ValueAndGrad(g[h], value, grad);
        const float uv = u[h];
        dg[h] = dy[h] * uv * grad;
        du[h] = dy[h] * value;
      }
    }
  });
}

using Use = F32Twin::Use;

// bf16 (gate, up, out, dout, dgate, dup): the fp32 kernels on fp32 twins (kernels/cpu/bf16.h); the twins of
// gate and up (and of their gradients) are packed, so their row strides become H.
void ForwardBF16(const Context& ctx, const SwiGluForwardParams& p) {
  const RowView gate_rows = RowView::Rows(p.N, p.H, p.gate_stride ? p.gate_stride : p.H);
  const RowView up_rows = RowView::Rows(p.N, p.H, p.up_stride ? p.up_stride : p.H);
  const F32Twin gate(ctx, p.dtype, p.gate, gate_rows, Use::kInput), up(ctx, p.dtype, p.up, up_rows, Use::kInput);
  const F32Twin out(ctx, p.dtype, p.out, RowView::Contiguous(p.N * p.H), Use::kOutput);
  SwiGluForwardParams f = p;
  f.dtype = DType::kF32;
  f.gate = gate.data(), f.up = up.data(), f.out = out.data();
  f.gate_stride = f.up_stride = p.H;
  cpu::SwiGluForward(ctx, f);
  out.Store(ctx);
}

void BackwardBF16(const Context& ctx, const SwiGluBackwardParams& p) {
  const RowView gate_rows = RowView::Rows(p.N, p.H, p.gate_stride ? p.gate_stride : p.H);
  const RowView up_rows = RowView::Rows(p.N, p.H, p.up_stride ? p.up_stride : p.H);
  const F32Twin gate(ctx, p.dtype, p.gate, gate_rows, Use::kInput), up(ctx, p.dtype, p.up, up_rows, Use::kInput);
  const F32Twin dout(ctx, p.dtype, p.dout, RowView::Contiguous(p.N * p.H), Use::kInput);
  const F32Twin dgate(ctx, p.dtype, p.dgate, gate_rows, Use::kOutput), dup(ctx, p.dtype, p.dup, up_rows, Use::kOutput);
  SwiGluBackwardParams f = p;
  f.dtype = DType::kF32;
  f.gate = gate.data(), f.up = up.data(), f.dout = dout.data(), f.dgate = dgate.data(), f.dup = dup.data();
  f.gate_stride = f.up_stride = p.H;
  cpu::SwiGluBackward(ctx, f);
  dgate.Store(ctx);
  dup.Store(ctx);
}

}  // namespace

void SwiGluForward(const Context& ctx, const SwiGluForwardParams& p) {
  CheckActivation(p.activation);
  if (p.dtype == DType::kBF16) return ForwardBF16(ctx, p);
  if (p.activation == Activation::kSilu) return Forward<Activation::kSilu>(ctx, p);
  Forward<Activation::kGeluTanh>(ctx, p);
}

void SwiGluBackward(const Context& ctx, const SwiGluBackwardParams& p) {
  CheckActivation(p.activation);
  if (p.dtype == DType::kBF16) return BackwardBF16(ctx, p);
  if (p.activation == Activation::kSilu) return Backward<Activation::kSilu>(ctx, p);
  Backward<Activation::kGeluTanh>(ctx, p);
}

}  // namespace lmf::kernels::cpu
