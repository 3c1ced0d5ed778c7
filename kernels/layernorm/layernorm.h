// LayerNorm over the last dimension, forward and backward (biased variance, as torch.nn.LayerNorm).
//
//   mean[n] = mean_c x[n, c];  rstd[n] = 1 / sqrt(mean_c (x[n, c] - mean[n])^2 + eps)
//   out[n, c] = (x[n, c] - mean[n]) * rstd[n] * weight[c] + bias[c]
// Forward saves mean and rstd (N). Backward writes dx (=), accumulates dweight and dbias (+=).
// Rows are contiguous ((N, C) row-major). bias may be null (no bias), then dbias must be null too.
#ifndef LMFORGE_KERNELS_LAYERNORM_LAYERNORM_H_
#define LMFORGE_KERNELS_LAYERNORM_LAYERNORM_H_

#include <cstdint>

#include "absl/status/status.h"
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

// The transformer block's "add the branch, then normalise for the next one" step, fused:
//   residual_out = residual + x (stored in dtype);  out = LayerNorm(residual_out), statistics from the stored
//   sum. Equal to ResidualForward then LayerNormForward on residual_out (the CUDA kernel reads each input
//   once). The backward is the unfused one: LayerNormBackward with x = residual_out, then the residual's.
struct ResidualLayerNormForwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0, C = 0;
  float eps = 1e-5f;
  const void* residual = nullptr;  // (N, C)
  const void* x = nullptr;         // (N, C), the branch output
  void* residual_out = nullptr;    // (N, C), may alias residual
  const void* weight = nullptr;    // (C)
  const void* bias = nullptr;      // (C) or null
  void* out = nullptr;             // (N, C)
  float* mean = nullptr;           // (N) or null
  float* rstd = nullptr;           // (N) or null
};

// The CUDA backend (layernorm_cuda.cu, built in where LMF_WITH_CUDA): the same params on device
// pointers, run on ctx.stream; argument errors, unsupported cases and CUDA errors come back as a Status.
namespace cuda {
absl::Status LayerNormForward(const Context& ctx, const LayerNormForwardParams& p);
absl::Status LayerNormBackward(const Context& ctx, const LayerNormBackwardParams& p);
absl::Status ResidualLayerNormForward(const Context& ctx, const ResidualLayerNormForwardParams& p);
}  // namespace cuda

namespace cpu {
void LayerNormForward(const Context& ctx, const LayerNormForwardParams& p);
void LayerNormBackward(const Context& ctx, const LayerNormBackwardParams& p);
void ResidualLayerNormForward(const Context& ctx, const ResidualLayerNormForwardParams& p);
}  // namespace cpu

inline void LayerNormForward(const Context& ctx, const LayerNormForwardParams& p) {
  if (!BackendSupports("layernorm", ctx.device, p.dtype)) UnsupportedOp("layernorm", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::LayerNormForward(ctx, p), "LayerNormForward");
#endif
  CpuOpScope op_scope("LayerNormForward");
  cpu::LayerNormForward(ctx, p);
}
inline void LayerNormBackward(const Context& ctx, const LayerNormBackwardParams& p) {
  if (!BackendSupports("layernorm", ctx.device, p.dtype)) UnsupportedOp("layernorm", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::LayerNormBackward(ctx, p), "LayerNormBackward");
#endif
  CpuOpScope op_scope("LayerNormBackward");
  cpu::LayerNormBackward(ctx, p);
}
inline void ResidualLayerNormForward(const Context& ctx, const ResidualLayerNormForwardParams& p) {
  if (!BackendSupports("layernorm", ctx.device, p.dtype)) UnsupportedOp("layernorm", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda())
    return CheckCuda(cuda::ResidualLayerNormForward(ctx, p), "ResidualLayerNormForward");
#endif
  CpuOpScope op_scope("ResidualLayerNormForward");
  cpu::ResidualLayerNormForward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_LAYERNORM_LAYERNORM_H_
