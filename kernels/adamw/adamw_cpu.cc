// CPU AdamW: one fused pass over param, grad, m and v, split over threads; the per-step constants are
// computed once in double.
#include <cmath>

#include "kernels/adamw/adamw.h"
#include "kernels/cpu/parallel.h"

namespace lmf::kernels::cpu {

void AdamWStep(const Context& ctx, const AdamWParams& p) {
  float* param = static_cast<float*>(p.param);
  const float* grad = static_cast<const float*>(p.grad);
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  const float step_size = static_cast<float>(p.lr / bc1);
  const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.0f - p.lr * p.weight_decay;
  const float b1 = p.beta1, b2 = p.beta2, one_b1 = 1.0f - p.beta1, one_b2 = 1.0f - p.beta2;
  ParallelForItems(ctx, p.n, 12, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i] * p.grad_scale;
      const float m = b1 * p.m[i] + one_b1 * g;
      const float v = b2 * p.v[i] + one_b2 * g * g;
      p.m[i] = m;
      p.v[i] = v;
      const float w = param[i] * decay;
      param[i] = w - step_size * m / ((std::sqrt(v) / sqrt_bc2 + p.eps));
    }
  });
}

}  // namespace lmf::kernels::cpu
