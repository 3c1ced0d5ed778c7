// Rotary position embedding (RoPE) rotating adjacent pairs (2i, 2i+1), as in CS336 and Llama, forward and
// backward.
//
//   angle(p, i) = p * theta^(-2i / HS),  i in [0, HS/2)
//   out[.., 2i]   = x[.., 2i] cos(angle) - x[.., 2i+1] sin(angle)
//   out[.., 2i+1] = x[.., 2i] sin(angle) + x[.., 2i+1] cos(angle)
// Backward is the inverse rotation of dout (RopeBackward takes the same params with in = dout, out = dx;
// written). x is viewed as (B, T, NH, HS) with element strides per dimension; HS is contiguous and even.
// The position of token t of batch b is positions[b * positions_stride_b + t], or t when positions is
// null. In-place use (in == out with equal strides) is allowed. Angles are computed in double and rounded
// once, so long positions stay exact to fp32 rounding.
#ifndef LMFORGE_KERNELS_ROPE_ROPE_H_
#define LMFORGE_KERNELS_ROPE_ROPE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct RopeParams {
  DType dtype = DType::kF32;
  int64_t B = 0, T = 0, NH = 0, HS = 0;
  float theta = 10000.0f;
  const void* in = nullptr;  // (B, T, NH, HS)
  int64_t in_stride_b = 0, in_stride_t = 0, in_stride_h = 0;
  void* out = nullptr;  // (B, T, NH, HS)
  int64_t out_stride_b = 0, out_stride_t = 0, out_stride_h = 0;
  const int32_t* positions = nullptr;  // (B, T) with row stride positions_stride_b (0 = shared), or null
  int64_t positions_stride_b = 0;
};

// The CUDA backend (rope_cuda.cu, built in where LMF_WITH_CUDA): the same params on device
// pointers, run on ctx.stream; argument errors, unsupported cases and CUDA errors come back as a Status.
namespace cuda {
absl::Status RopeForward(const Context& ctx, const RopeParams& p);
absl::Status RopeBackward(const Context& ctx, const RopeParams& p);
}  // namespace cuda

namespace cpu {
void RopeForward(const Context& ctx, const RopeParams& p);
void RopeBackward(const Context& ctx, const RopeParams& p);
}  // namespace cpu

inline void RopeForward(const Context& ctx, const RopeParams& p) {
  if (!BackendSupports("rope", ctx.device, p.dtype)) UnsupportedOp("rope", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::RopeForward(ctx, p), "RopeForward");
#endif
  CpuOpScope op_scope("RopeForward");
  cpu::RopeForward(ctx, p);
}
// in = dout, out = dx.
inline void RopeBackward(const Context& ctx, const RopeParams& p) {
  if (!BackendSupports("rope", ctx.device, p.dtype)) UnsupportedOp("rope", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::RopeBackward(ctx, p), "RopeBackward");
#endif
  CpuOpScope op_scope("RopeBackward");
  cpu::RopeBackward(ctx, p);
}

// Params for contiguous (B, T, NH, HS) in and out.
RopeParams ContiguousRopeParams(int64_t B, int64_t T, int64_t NH, int64_t HS, float theta, const void* in,
                                void* out);

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_ROPE_ROPE_H_
