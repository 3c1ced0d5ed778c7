// Residual add, forward and backward.
//
//   forward:  out[i] = a[i] + b[i]              (out may alias a or b)
//   backward: da[i] += dout[i]; db[i] += dout[i]  (both accumulate: a residual stream's gradient is the
//             sum of the branch gradient and the skip gradient; null outputs are skipped)
#ifndef LMFORGE_KERNELS_RESIDUAL_RESIDUAL_H_
#define LMFORGE_KERNELS_RESIDUAL_RESIDUAL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct ResidualForwardParams {
  DType dtype = DType::kF32;
  int64_t n = 0;
  const void* a = nullptr;  // (n)
  const void* b = nullptr;  // (n)
  void* out = nullptr;      // (n)
};

struct ResidualBackwardParams {
  DType dtype = DType::kF32;
  int64_t n = 0;
  const void* dout = nullptr;  // (n)
  void* da = nullptr;          // (n), accumulated, or null
  void* db = nullptr;          // (n), accumulated, or null
};

// The CUDA backend (residual_cuda.cu, built in where LMF_WITH_CUDA): the same params on device
// pointers, run on ctx.stream; argument errors, unsupported cases and CUDA errors come back as a Status.
namespace cuda {
absl::Status ResidualForward(const Context& ctx, const ResidualForwardParams& p);
absl::Status ResidualBackward(const Context& ctx, const ResidualBackwardParams& p);
}  // namespace cuda

namespace cpu {
void ResidualForward(const Context& ctx, const ResidualForwardParams& p);
void ResidualBackward(const Context& ctx, const ResidualBackwardParams& p);
}  // namespace cpu

inline void ResidualForward(const Context& ctx, const ResidualForwardParams& p) {
  if (!BackendSupports("residual", ctx.device, p.dtype)) UnsupportedOp("residual", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::ResidualForward(ctx, p), "ResidualForward");
#endif
  CpuOpScope op_scope("ResidualForward");
  cpu::ResidualForward(ctx, p);
}
inline void ResidualBackward(const Context& ctx, const ResidualBackwardParams& p) {
  if (!BackendSupports("residual", ctx.device, p.dtype)) UnsupportedOp("residual", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::ResidualBackward(ctx, p), "ResidualBackward");
#endif
  CpuOpScope op_scope("ResidualBackward");
  cpu::ResidualBackward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_RESIDUAL_RESIDUAL_H_
