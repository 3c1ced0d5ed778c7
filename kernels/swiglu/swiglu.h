// Gated linear unit, forward and backward: out = act(gate) * up, the middle of a gated feed-forward
// (W2 (act(x W1^T) * (x W3^T))): act SiLU for SwiGLU (the default; Llama) or GELU-tanh for GeGLU (Gemma,
// T5 v1.1). gate and up are read with a row stride so that both can live side by side in one (N, 2H) buffer
// produced by a single fused matmul.
//
//   forward:  out[n, h] = act(gate[n, h]) * up[n, h]
//   backward: dgate = dout * up * act'(gate), dup = dout * act(gate), written (=), with the same row strides
//             as gate and up.
#ifndef LMFORGE_KERNELS_SWIGLU_SWIGLU_H_
#define LMFORGE_KERNELS_SWIGLU_SWIGLU_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/activations/activations.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct SwiGluForwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0;               // rows (B * T)
  int64_t H = 0;               // hidden width (d_ff)
  const void* gate = nullptr;  // (N, H), row stride gate_stride
  int64_t gate_stride = 0;     // elements between rows; 0 means H
  const void* up = nullptr;    // (N, H), row stride up_stride
  int64_t up_stride = 0;       // 0 means H
  void* out = nullptr;         // (N, H), contiguous
  Activation activation = Activation::kSilu;  // of the gate: kSilu (SwiGLU) or kGeluTanh (GeGLU)
};

struct SwiGluBackwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0, H = 0;
  const void* gate = nullptr;  // forward inputs, strides as in the forward
  int64_t gate_stride = 0;
  const void* up = nullptr;
  int64_t up_stride = 0;
  const void* dout = nullptr;  // (N, H), contiguous
  void* dgate = nullptr;       // (N, H), row stride gate_stride, written
  void* dup = nullptr;         // (N, H), row stride up_stride, written
  Activation activation = Activation::kSilu;  // as in the forward
};

// The CUDA backend (swiglu_cuda.cu, built in where LMF_WITH_CUDA): the same params on device
// pointers, run on ctx.stream; argument errors, unsupported cases and CUDA errors come back as a Status.
namespace cuda {
absl::Status SwiGluForward(const Context& ctx, const SwiGluForwardParams& p);
absl::Status SwiGluBackward(const Context& ctx, const SwiGluBackwardParams& p);
}  // namespace cuda

namespace cpu {
void SwiGluForward(const Context& ctx, const SwiGluForwardParams& p);
void SwiGluBackward(const Context& ctx, const SwiGluBackwardParams& p);
}  // namespace cpu

inline void SwiGluForward(const Context& ctx, const SwiGluForwardParams& p) {
  if (!BackendSupports("swiglu", ctx.device, p.dtype)) UnsupportedOp("swiglu", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::SwiGluForward(ctx, p), "SwiGluForward");
#endif
  CpuOpScope op_scope("SwiGluForward");
  cpu::SwiGluForward(ctx, p);
}
inline void SwiGluBackward(const Context& ctx, const SwiGluBackwardParams& p) {
  if (!BackendSupports("swiglu", ctx.device, p.dtype)) UnsupportedOp("swiglu", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::SwiGluBackward(ctx, p), "SwiGluBackward");
#endif
  CpuOpScope op_scope("SwiGluBackward");
  cpu::SwiGluBackward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_SWIGLU_SWIGLU_H_
