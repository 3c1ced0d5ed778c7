// LayerNorm over the last dimension, forward and backward (biased variance, as torch.nn.LayerNorm).
//
//   mean[n] = mean_c x[n, c];  rstd[n] = 1 / sqrt(mean_c (x[n, c] - mean[n])^2 + eps)
//   out[n, c] = (x[n, c] - mean[n]) * rstd[n] * weight[c] + bias[c]
// Forward saves mean and rstd (N). Backward writes dx (=), accumulates dweight and dbias (+=).
// Rows are contiguous ((N, C) row-major). bias may be null (no bias), then dbias must be null too.
#ifndef LMFORGE_KERNELS_LAYERNORM_LAYERNORM_H_
#define LMFORGE_KERNELS_LAYERNORM_LAYERNORM_H_

#include <cstdint>

#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct LayerNormForwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0;  // rows (B * T)
  int64_t C = 0;  // channels
  float eps = 1e-5f;
  const void* x = nullptr;       // (N, C)
  const void* weight = nullptr;  // (C)
  const void* bias = nullptr;    // (C) or null
  void* out = nullptr;           // (N, C)
  float* mean = nullptr;         // (N), saved for backward (may be null when no backward follows)
  float* rstd = nullptr;         // (N), saved for backward (may be null when no backward follows)
};

struct LayerNormBackwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0, C = 0;
  const void* x = nullptr;       // (N, C), the forward input
  const void* weight = nullptr;  // (C)
  const float* mean = nullptr;   // (N)
  const float* rstd = nullptr;   // (N)
  const void* dout = nullptr;    // (N, C)
  void* dx = nullptr;            // (N, C), written
  void* dweight = nullptr;       // (C), accumulated
  void* dbias = nullptr;         // (C), accumulated; null when the layer has no bias
};

namespace cpu {
void LayerNormForward(const Context& ctx, const LayerNormForwardParams& p);
void LayerNormBackward(const Context& ctx, const LayerNormBackwardParams& p);
}  // namespace cpu

inline void LayerNormForward(const Context& ctx, const LayerNormForwardParams& p) {
  if (!BackendSupports("layernorm", ctx.device, p.dtype)) UnsupportedOp("layernorm", ctx, p.dtype);
  cpu::LayerNormForward(ctx, p);
}
inline void LayerNormBackward(const Context& ctx, const LayerNormBackwardParams& p) {
  if (!BackendSupports("layernorm", ctx.device, p.dtype)) UnsupportedOp("layernorm", ctx, p.dtype);
  cpu::LayerNormBackward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_LAYERNORM_LAYERNORM_H_
