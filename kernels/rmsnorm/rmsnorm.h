// RMSNorm over the last dimension, forward and backward.
//
//   rstd[n] = 1 / sqrt(mean_c(x[n, c]^2) + eps)
//   out[n, c] = x[n, c] * rstd[n] * weight[c]
// Forward saves rstd (N) for backward. Backward writes dx (=) and accumulates dweight (+=).
// Rows are contiguous (x, out, dout, dx are (N, C) row-major). out may alias x; dx may alias dout.
#ifndef LMFORGE_KERNELS_RMSNORM_RMSNORM_H_
#define LMFORGE_KERNELS_RMSNORM_RMSNORM_H_

#include <cstdint>

#include "absl/status/status.h"
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

// The transformer block's "add the branch, then normalise for the next one" step, fused:
//   residual_out = residual + x (stored in dtype);  out = RMSNorm(residual_out) with rstd from the stored
//   sum.
// Equal to ResidualForward then RmsNormForward on residual_out (the CUDA kernel reads each input once).
// The backward is the unfused one: RmsNormBackward with x = residual_out, then the residual's gradient.
struct ResidualRmsNormForwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0, C = 0;
  float eps = 1e-5f;
  const void* residual = nullptr;  // (N, C)
  const void* x = nullptr;         // (N, C), the branch output
  void* residual_out = nullptr;    // (N, C), may alias residual
  const void* weight = nullptr;    // (C)
  void* out = nullptr;             // (N, C)
  float* rstd = nullptr;           // (N) or null
};

// The CUDA backend (rmsnorm_cuda.cu, built in where LMF_WITH_CUDA): the same params on device
// pointers, run on ctx.stream; argument errors, unsupported cases and CUDA errors come back as a Status.
namespace cuda {
absl::Status RmsNormForward(const Context& ctx, const RmsNormForwardParams& p);
absl::Status RmsNormBackward(const Context& ctx, const RmsNormBackwardParams& p);
absl::Status ResidualRmsNormForward(const Context& ctx, const ResidualRmsNormForwardParams& p);
}  // namespace cuda

namespace cpu {
void RmsNormForward(const Context& ctx, const RmsNormForwardParams& p);
void RmsNormBackward(const Context& ctx, const RmsNormBackwardParams& p);
void ResidualRmsNormForward(const Context& ctx, const ResidualRmsNormForwardParams& p);
}  // namespace cpu

inline void RmsNormForward(const Context& ctx, const RmsNormForwardParams& p) {
  if (!BackendSupports("rmsnorm", ctx.device, p.dtype)) UnsupportedOp("rmsnorm", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::RmsNormForward(ctx, p), "RmsNormForward");
#endif
  CpuOpScope op_scope("RmsNormForward");
  cpu::RmsNormForward(ctx, p);
}
inline void RmsNormBackward(const Context& ctx, const RmsNormBackwardParams& p) {
  if (!BackendSupports("rmsnorm", ctx.device, p.dtype)) UnsupportedOp("rmsnorm", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::RmsNormBackward(ctx, p), "RmsNormBackward");
#endif
  CpuOpScope op_scope("RmsNormBackward");
  cpu::RmsNormBackward(ctx, p);
}
inline void ResidualRmsNormForward(const Context& ctx, const ResidualRmsNormForwardParams& p) {
  if (!BackendSupports("rmsnorm", ctx.device, p.dtype)) UnsupportedOp("rmsnorm", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::ResidualRmsNormForward(ctx, p), "ResidualRmsNormForward");
#endif
  CpuOpScope op_scope("ResidualRmsNormForward");
  cpu::ResidualRmsNormForward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_RMSNORM_RMSNORM_H_
