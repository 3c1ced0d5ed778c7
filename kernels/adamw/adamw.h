// AdamW step (decoupled weight decay, bias correction), exactly torch.optim.AdamW's update:
//
//   param -= lr * weight_decay * param
//   g = grad * grad_scale                          (grad_scale folds in gradient clipping)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// step counts from 1. m and v are fp32 and start at zero. Updates param, m, v in place.
//
// MultiTensorAdamW updates many tensors in one call (one launch on CUDA): fp32 master weights and moments,
// fp32 or bf16 gradients (bf16: CUDA only), an optional bf16 copy of each updated tensor for the next
// forward, clipping from a norm that stays where it was computed (GlobalGradNormToDevice), and on the CPU
// the gradients zeroed in the same pass (zero_grads).
#ifndef LMFORGE_KERNELS_ADAMW_ADAMW_H_
#define LMFORGE_KERNELS_ADAMW_ADAMW_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct AdamWParams {
  DType dtype = DType::kF32;  // of param and grad
  int64_t n = 0;
  void* param = nullptr;       // (n)
  const void* grad = nullptr;  // (n)
  float* m = nullptr;          // (n) first moment
  float* v = nullptr;          // (n) second moment
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;  // 1-based
  float grad_scale = 1.0f;
};

// One tensor of a MultiTensorAdamW call. Pointers are in the memory of the Context's device.
struct AdamWTensor {
  int64_t n = 0;
  float* param = nullptr;      // (n) fp32 master weights, updated in place
  const void* grad = nullptr;  // (n) in MultiTensorAdamWParams::grad_dtype; set to zero with zero_grads
  float* m = nullptr;          // (n) first moment
  float* v = nullptr;          // (n) second moment
  void* param_copy = nullptr;  // (n) bf16 copy of the updated param (rounded to nearest even), or null
};

struct MultiTensorAdamWParams {
  DType grad_dtype = DType::kF32;        // kF32, or kBF16 on CUDA
  const AdamWTensor* tensors = nullptr;  // host array of num_tensors descriptors (device pointers inside)
  int64_t num_tensors = 0;
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  int64_t step = 1;  // 1-based
  float grad_scale = 1.0f;
  // Clipping without a host round trip: when norm != null (one float in the device's memory, e.g. from
  // GlobalGradNormToDevice), the gradients are also scaled by min(1, max_norm / (*norm + 1e-6)) (ClipScale
  // of grad_norm.h), read where the update runs.
  const float* norm = nullptr;
  float max_norm = 1.0f;
  // When true, every gradient is set to zero in the same pass, each element after it is read: the next
  // step's zero_grad without a pass of its own over the gradients (on the CPU one write stream added to
  // AdamW's seven instead of a memset of every gradient). The CPU backend only (fp32 gradients); CUDA
  // answers InvalidArgument.
  bool zero_grads = false;
};

// The CUDA backend (adamw_cuda.cu, built in where LMF_WITH_CUDA): AdamWStep takes fp32 param and grad;
// MultiTensorAdamW fp32 or bf16 grads. Argument and CUDA errors come back as a Status.
namespace cuda {
absl::Status AdamWStep(const Context& ctx, const AdamWParams& p);
absl::Status MultiTensorAdamW(const Context& ctx, const MultiTensorAdamWParams& p);
}  // namespace cuda

namespace cpu {
void MultiTensorAdamW(const Context& ctx, const MultiTensorAdamWParams& p);
void AdamWStep(const Context& ctx, const AdamWParams& p);
}  // namespace cpu

inline void AdamWStep(const Context& ctx, const AdamWParams& p) {
  if (!BackendSupports("adamw", ctx.device, p.dtype)) UnsupportedOp("adamw", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::AdamWStep(ctx, p), "AdamWStep");
#endif
  CpuOpScope op_scope("AdamWStep");
  cpu::AdamWStep(ctx, p);
}
inline void MultiTensorAdamW(const Context& ctx, const MultiTensorAdamWParams& p) {
  if (!BackendSupports("adamw", ctx.device, p.grad_dtype)) UnsupportedOp("adamw", ctx, p.grad_dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MultiTensorAdamW(ctx, p), "MultiTensorAdamW");
#endif
  CpuOpScope op_scope("MultiTensorAdamW");
  cpu::MultiTensorAdamW(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_ADAMW_ADAMW_H_
