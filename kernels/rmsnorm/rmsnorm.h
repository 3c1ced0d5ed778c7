// RMSNorm over the last dimension, forward and backward.
//
//   rstd[n] = 1 / sqrt(mean_c(x[n, c]^2) + eps)
//   out[n, c] = x[n, c] * rstd[n] * weight[c]
// Forward saves rstd (N) for backward. Backward writes dx (=) and accumulates dweight (+=).
// Rows are contiguous (x, out, dout, dx are (N, C) row-major). out may alias x; dx may alias dout.
#ifndef LMFORGE_KERNELS_RMSNORM_RMSNORM_H_
#define LMFORGE_KERNELS_RMSNORM_RMSNORM_H_

#include <cstdint>

#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct RmsNormForwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0;  // rows (B * T)
  int64_t C = 0;  // channels
  float eps = 1e-5f;
  const void* x = nullptr;       // (N, C)
  const void* weight = nullptr;  // (C)
  void* out = nullptr;           // (N, C)
  float* rstd = nullptr;         // (N), saved for backward; may be null when no backward follows
};

struct RmsNormBackwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0, C = 0;
  const void* x = nullptr;       // (N, C), the forward input
  const void* weight = nullptr;  // (C)
  const float* rstd = nullptr;   // (N), from the forward
  const void* dout = nullptr;    // (N, C)
  void* dx = nullptr;            // (N, C), written
  void* dweight = nullptr;       // (C), accumulated
};

namespace cpu {
void RmsNormForward(const Context& ctx, const RmsNormForwardParams& p);
void RmsNormBackward(const Context& ctx, const RmsNormBackwardParams& p);
}  // namespace cpu

inline void RmsNormForward(const Context& ctx, const RmsNormForwardParams& p) {
  if (!BackendSupports("rmsnorm", ctx.device, p.dtype)) UnsupportedOp("rmsnorm", ctx, p.dtype);
  cpu::RmsNormForward(ctx, p);
}
inline void RmsNormBackward(const Context& ctx, const RmsNormBackwardParams& p) {
  if (!BackendSupports("rmsnorm", ctx.device, p.dtype)) UnsupportedOp("rmsnorm", ctx, p.dtype);
  cpu::RmsNormBackward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_RMSNORM_RMSNORM_H_
