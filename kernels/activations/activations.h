// Pointwise activations, forward and backward: SiLU, GELU (tanh approximation, as
// torch.nn.functional.gelu(approximate="tanh")), ReLU and the soft-cap c tanh(x / c) (Gemma 2's final-logit
// capping; `cap` > 0 is c, read by kSoftCap only).
//
//   forward:  out[i] = f(x[i])
//   backward: dx[i] = dout[i] * f'(x[i])   (written; needs the forward input x)
// out may alias x; dx may alias dout. ReLU'(0) = 0, as in PyTorch.
#ifndef LMFORGE_KERNELS_ACTIVATIONS_ACTIVATIONS_H_
#define LMFORGE_KERNELS_ACTIVATIONS_ACTIVATIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

enum class Activation : uint8_t { kSilu, kGeluTanh, kRelu, kSoftCap };

const char* ActivationName(Activation a);

struct ActivationForwardParams {
  DType dtype = DType::kF32;
  Activation kind = Activation::kGeluTanh;
  int64_t n = 0;            // elements
  const void* x = nullptr;  // (n)
  void* out = nullptr;      // (n)
  float cap = 0.0f;         // kSoftCap's c (> 0)
};

struct ActivationBackwardParams {
  DType dtype = DType::kF32;
  Activation kind = Activation::kGeluTanh;
  int64_t n = 0;
  const void* x = nullptr;     // (n), the forward input
  const void* dout = nullptr;  // (n)
  void* dx = nullptr;          // (n), written
  float cap = 0.0f;            // kSoftCap's c (> 0)
};

// The CUDA backend (activations_cuda.cu, built in where LMF_WITH_CUDA): the same params on device
// pointers, run on ctx.stream; argument errors, unsupported cases and CUDA errors come back as a Status.
namespace cuda {
absl::Status ActivationForward(const Context& ctx, const ActivationForwardParams& p);
absl::Status ActivationBackward(const Context& ctx, const ActivationBackwardParams& p);
}  // namespace cuda

namespace cpu {
void ActivationForward(const Context& ctx, const ActivationForwardParams& p);
void ActivationBackward(const Context& ctx, const ActivationBackwardParams& p);
}  // namespace cpu

inline void ActivationForward(const Context& ctx, const ActivationForwardParams& p) {
  if (!BackendSupports("activation", ctx.device, p.dtype)) UnsupportedOp("activation", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::ActivationForward(ctx, p), "ActivationForward");
#endif
  CpuOpScope op_scope("ActivationForward");
  cpu::ActivationForward(ctx, p);
}
inline void ActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  if (!BackendSupports("activation", ctx.device, p.dtype)) UnsupportedOp("activation", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::ActivationBackward(ctx, p), "ActivationBackward");
#endif
  CpuOpScope op_scope("ActivationBackward");
  cpu::ActivationBackward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_ACTIVATIONS_ACTIVATIONS_H_
