// AdamW step (decoupled weight decay, bias correction), exactly torch.optim.AdamW's update:
//
//   param -= lr * weight_decay * param
//   g = grad * grad_scale                          (grad_scale folds in gradient clipping)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// step counts from 1. m and v are fp32 and start at zero. Updates param, m, v in place.
#ifndef LMFORGE_KERNELS_ADAMW_ADAMW_H_
#define LMFORGE_KERNELS_ADAMW_ADAMW_H_

#include <cstdint>

#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct AdamWParams {
  DType dtype = DType::kF32;  // of param and grad
  int64_t n = 0;
  void* param = nullptr;       // (n)
  const void* grad = nullptr;  // (n)
  float* m = nullptr;          // (n) first moment
  float* v = nullptr;          // (n) second moment
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;  // 1-based
  float grad_scale = 1.0f;
};

namespace cpu {
void AdamWStep(const Context& ctx, const AdamWParams& p);
}  // namespace cpu

inline void AdamWStep(const Context& ctx, const AdamWParams& p) {
  if (!BackendSupports("adamw", ctx.device, p.dtype)) UnsupportedOp("adamw", ctx, p.dtype);
  cpu::AdamWStep(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_ADAMW_ADAMW_H_
