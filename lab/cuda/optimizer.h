// CUDA optimizer kernels: multi-tensor AdamW (torch.optim.AdamW's math, fp32 master weights and moments,
// fp32 or bf16 gradients, optional bf16 copy of the updated weights for the next forward) and the global
// gradient norm with a deterministic two-pass reduction (fixed chunks, fp32 within a chunk, double across
// chunks in a fixed order, as the CPU kernel) that can stay on the device and feed AdamW's clipping without
// a host synchronisation.
#ifndef LMFORGE_LAB_CUDA_OPTIMIZER_H_
#define LMFORGE_LAB_CUDA_OPTIMIZER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/adamw/adamw.h"
#include "kernels/core/context.h"
#include "kernels/grad_norm/grad_norm.h"

namespace lmf::kernels::cuda {

struct AdamWTensor {
  int64_t n = 0;
  float* param = nullptr;      // (n) fp32 master weights, updated in place
  const void* grad = nullptr;  // (n) in MultiTensorAdamWParams::grad_dtype
  float* m = nullptr;          // (n)
  float* v = nullptr;          // (n)
  void* param_copy = nullptr;  // (n) bf16 copy of the updated weights, or null
};

struct MultiTensorAdamWParams {
  DType grad_dtype = DType::kF32;        // kF32 or kBF16
  const AdamWTensor* tensors = nullptr;  // host array of num_tensors descriptors (device pointers inside)
  int64_t num_tensors = 0;
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  int64_t step = 1;  // 1-based
  float grad_scale = 1.0f;
  // Clipping from a norm that stays on the device: when norm != null, grads are also multiplied by
  // ClipScale(*norm, max_norm) read on the device.
  const float* norm = nullptr;
  float max_norm = 1.0f;
};

// One tensor, the CPU params (dtype kF32: param and grad fp32).
absl::Status AdamWStep(const Context& ctx, const AdamWParams& p);
absl::Status MultiTensorAdamW(const Context& ctx, const MultiTensorAdamWParams& p);

// Writes the global L2 norm of the gradients to norm_device (one float on the device); no host sync.
// p.dtype is the gradients' dtype (kF32 or kBF16).
absl::Status GlobalGradNormToDevice(const Context& ctx, const GradNormParams& p, float* norm_device);
// The norm on the host (synchronises the stream).
absl::StatusOr<float> GlobalGradNorm(const Context& ctx, const GradNormParams& p);
// Scales every gradient by ClipScale(norm, max_norm) in place and returns the pre-clip norm (synchronises).
absl::StatusOr<float> ClipGradNorm(const Context& ctx, const GradNormParams& p, float max_norm);

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_LAB_CUDA_OPTIMIZER_H_
