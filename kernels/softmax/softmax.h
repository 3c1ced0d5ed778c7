// Softmax over the last dimension, forward and backward.
//
//   forward:  out[n, c] = exp(x[n, c] - max_c x[n, :]) / sum_c exp(...)
//   backward: dx[n, c] = out[n, c] * (dout[n, c] - sum_c dout[n, c] out[n, c])   (written; needs out)
// Rows are contiguous ((N, C) row-major); out may alias x, dx may alias dout.
#ifndef LMFORGE_KERNELS_SOFTMAX_SOFTMAX_H_
#define LMFORGE_KERNELS_SOFTMAX_SOFTMAX_H_

#include <cstdint>

#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct SoftmaxForwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0, C = 0;
  const void* x = nullptr;  // (N, C)
  void* out = nullptr;      // (N, C)
};

struct SoftmaxBackwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0, C = 0;
  const void* out = nullptr;   // (N, C), the forward output
  const void* dout = nullptr;  // (N, C)
  void* dx = nullptr;          // (N, C), written
};

namespace cpu {
void SoftmaxForward(const Context& ctx, const SoftmaxForwardParams& p);
void SoftmaxBackward(const Context& ctx, const SoftmaxBackwardParams& p);
}  // namespace cpu

inline void SoftmaxForward(const Context& ctx, const SoftmaxForwardParams& p) {
  if (!BackendSupports("softmax", ctx.device, p.dtype)) UnsupportedOp("softmax", ctx, p.dtype);
  CpuOpScope op_scope("SoftmaxForward");
  cpu::SoftmaxForward(ctx, p);
}
inline void SoftmaxBackward(const Context& ctx, const SoftmaxBackwardParams& p) {
  if (!BackendSupports("softmax", ctx.device, p.dtype)) UnsupportedOp("softmax", ctx, p.dtype);
  CpuOpScope op_scope("SoftmaxBackward");
  cpu::SoftmaxBackward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_SOFTMAX_SOFTMAX_H_
