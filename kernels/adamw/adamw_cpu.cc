// CPU AdamW: one fused pass over param, grad, m and v (and zeroing grad when asked), 8 lanes at a time
// (AVX2 sqrt and division; the scalar tail does the same operations), split over threads. Per-step
// constants are computed once in double. The operation order follows torch.optim.AdamW (single-tensor path):
//   param *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   param -= (lr / bc1) * (m / (sqrt(v) / sqrt(bc2) + eps))
#include <immintrin.h>

#include <cmath>

#include "base/check.h"
#include "kernels/adamw/adamw.h"
#include "kernels/cast/cast.h"
#include "kernels/cpu/parallel.h"
#include "kernels/grad_norm/grad_norm.h"

namespace lmf::kernels::cpu {

namespace {

// AdamWStep's update; with zero_grad (the same array as p.grad) each gradient element is set to zero after
// it is read, in the same loop.
void Update(const Context& ctx, const AdamWParams& p, float* zero_grad) {
  float* param = static_cast<float*>(p.param);
  const float* grad = static_cast<const float*>(p.grad);
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  const float step_size = static_cast<float>(p.lr / bc1);
  const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.0f - p.lr * p.weight_decay;
  const float b1 = p.beta1, b2 = p.beta2, one_b1 = 1.0f - p.beta1, one_b2 = 1.0f - p.beta2;
  const float gs = p.grad_scale, eps = p.eps;
  ParallelForItems(ctx, p.n, 12, [&](int64_t begin, int64_t end) {
    const __m256 vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2), v1b1 = _mm256_set1_ps(one_b1);
    const __m256 v1b2 = _mm256_set1_ps(one_b2), vgs = _mm256_set1_ps(gs), veps = _mm256_set1_ps(eps);
    const __m256 vdecay = _mm256_set1_ps(decay), vstep = _mm256_set1_ps(step_size),
                 vsbc2 = _mm256_set1_ps(sqrt_bc2);
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), vgs);
      const __m256 m = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(p.m + i)), _mm256_mul_ps(v1b1, g));
      const __m256 v = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(p.v + i)),
                                     _mm256_mul_ps(v1b2, _mm256_mul_ps(g, g)));
      _mm256_storeu_ps(p.m + i, m);
      _mm256_storeu_ps(p.v + i, v);
      const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), vsbc2), veps);
      const __m256 w = _mm256_mul_ps(_mm256_loadu_ps(param + i), vdecay);
      _mm256_storeu_ps(param + i, _mm256_sub_ps(w, _mm256_mul_ps(vstep, _mm256_div_ps(m, denom))));
      if (zero_grad != nullptr) _mm256_storeu_ps(zero_grad + i, _mm256_setzero_ps());
    }
    for (; i < end; ++i) {
      const float g = grad[i] * gs;
      const float m = b1 * p.m[i] + one_b1 * g;
      const float v = b2 * p.v[i] + one_b2 * (g * g);
      p.m[i] = m;
      p.v[i] = v;
      const float w = param[i] * decay;
      param[i] = w - step_size * (m / (std::sqrt(v) / sqrt_bc2 + eps));
      if (zero_grad != nullptr) zero_grad[i] = 0.0f;
    }
  });
}

}  // namespace

void AdamWStep(const Context& ctx, const AdamWParams& p) { Update(ctx, p, nullptr); }

// AdamWStep per tensor (zeroing its gradient in the same loop with zero_grads), with the clip scale folded
// into grad_scale (as the CUDA kernel does), then the bf16 copy from the updated fp32 param.
void MultiTensorAdamW(const Context& ctx, const MultiTensorAdamWParams& p) {
  LMF_CHECK_EQ(p.grad_dtype, DType::kF32) << "the CPU AdamW takes fp32 gradients";
  LMF_CHECK_GE(p.step, 1) << "AdamW steps count from 1";
  float grad_scale = p.grad_scale;
  if (p.norm != nullptr) grad_scale *= ClipScale(*p.norm, p.max_norm);
  for (int64_t i = 0; i < p.num_tensors; ++i) {
    const AdamWTensor& t = p.tensors[i];
    AdamWParams a;
    a.dtype = DType::kF32;
    a.n = t.n;
    a.param = t.param;
    a.grad = t.grad;
    a.m = t.m;
    a.v = t.v;
    a.lr = p.lr;
    a.beta1 = p.beta1;
    a.beta2 = p.beta2;
    a.eps = p.eps;
    a.weight_decay = p.weight_decay;
    a.step = p.step;
    a.grad_scale = grad_scale;
    // zero_grads: the caller handed over the gradients to be cleared (AdamWTensor::grad).
    Update(ctx, a, p.zero_grads ? const_cast<float*>(static_cast<const float*>(t.grad)) : nullptr);
    if (t.param_copy != nullptr) {
      CastParams copy;
      copy.n = t.n;
      copy.src_dtype = DType::kF32;
      copy.dst_dtype = DType::kBF16;
      copy.src = t.param;
      copy.dst = t.param_copy;
      cpu::Cast(ctx, copy);
    }
  }
}

}  // namespace lmf::kernels::cpu
