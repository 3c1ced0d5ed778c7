// Global gradient norm over many tensors and clipping by it, as torch.nn.utils.clip_grad_norm_:
//
//   norm = sqrt(sum over tensors and elements of g^2)     (accumulated in double)
//   clip_scale = min(1, max_norm / (norm + 1e-6))
//   ClipGradNorm multiplies every gradient by clip_scale in place and returns norm (before clipping).
// To save a pass over the gradients, call GlobalGradNorm, then pass ClipScale(norm, max_norm) to
// AdamWParams::grad_scale instead of ClipGradNorm. GlobalGradNormToDevice leaves the norm in the device's
// memory (no host synchronisation on CUDA) for MultiTensorAdamWParams::norm.
// The sum is deterministic on both backends: fp32 within fixed blocks of 16384 elements, double across
// blocks in a fixed order. On CUDA, GlobalGradNorm and ClipGradNorm synchronise the stream to return the
// norm.
#ifndef LMFORGE_KERNELS_GRAD_NORM_GRAD_NORM_H_
#define LMFORGE_KERNELS_GRAD_NORM_GRAD_NORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct GradSpan {
  void* data = nullptr;  // (n); only read by GlobalGradNorm
  int64_t n = 0;
};

struct GradNormParams {
  DType dtype = DType::kF32;
  const GradSpan* grads = nullptr;  // num_grads spans
  int64_t num_grads = 0;
};

// min(1, max_norm / (norm + 1e-6)).
inline float ClipScale(float norm, float max_norm) {
  const float s = max_norm / (norm + 1e-6f);
  return s < 1.0f ? s : 1.0f;
}

// The CUDA backend (grad_norm_cuda.cu, built in where LMF_WITH_CUDA): gradients f32 or bf16.
namespace cuda {
absl::Status GlobalGradNormToDevice(const Context& ctx, const GradNormParams& p, float* norm_device);
absl::StatusOr<float> GlobalGradNorm(const Context& ctx, const GradNormParams& p);
absl::StatusOr<float> ClipGradNorm(const Context& ctx, const GradNormParams& p, float max_norm);
}  // namespace cuda

namespace cpu {
void GlobalGradNormToDevice(const Context& ctx, const GradNormParams& p, float* norm_device);
float GlobalGradNorm(const Context& ctx, const GradNormParams& p);
float ClipGradNorm(const Context& ctx, const GradNormParams& p, float max_norm);
}  // namespace cpu

inline float GlobalGradNorm(const Context& ctx, const GradNormParams& p) {
  if (!BackendSupports("grad_norm", ctx.device, p.dtype)) UnsupportedOp("grad_norm", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCudaValue(cuda::GlobalGradNorm(ctx, p), "GlobalGradNorm");
#endif
  CpuOpScope op_scope("GlobalGradNorm");
  return cpu::GlobalGradNorm(ctx, p);
}
inline float ClipGradNorm(const Context& ctx, const GradNormParams& p, float max_norm) {
  if (!BackendSupports("grad_norm", ctx.device, p.dtype)) UnsupportedOp("grad_norm", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCudaValue(cuda::ClipGradNorm(ctx, p, max_norm), "ClipGradNorm");
#endif
  CpuOpScope op_scope("ClipGradNorm");
  return cpu::ClipGradNorm(ctx, p, max_norm);
}
// Writes the norm to norm_device (one float in the device's memory); ordered on ctx.stream, no host sync.
inline void GlobalGradNormToDevice(const Context& ctx, const GradNormParams& p, float* norm_device) {
  if (!BackendSupports("grad_norm", ctx.device, p.dtype)) UnsupportedOp("grad_norm", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda())
    return CheckCuda(cuda::GlobalGradNormToDevice(ctx, p, norm_device), "GlobalGradNormToDevice");
#endif
  CpuOpScope op_scope("GlobalGradNormToDevice");
  cpu::GlobalGradNormToDevice(ctx, p, norm_device);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_GRAD_NORM_GRAD_NORM_H_
