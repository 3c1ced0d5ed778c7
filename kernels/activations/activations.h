// Pointwise activations, forward and backward: SiLU, GELU (tanh approximation, as
// torch.nn.functional.gelu(approximate="tanh")) and ReLU.
//
//   forward:  out[i] = f(x[i])
//   backward: dx[i] = dout[i] * f'(x[i])   (written; needs the forward input x)
// out may alias x; dx may alias dout. ReLU'(0) = 0, as in PyTorch.
#ifndef LMFORGE_KERNELS_ACTIVATIONS_ACTIVATIONS_H_
#define LMFORGE_KERNELS_ACTIVATIONS_ACTIVATIONS_H_

#include <cstdint>

#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

enum class Activation : uint8_t { kSilu, kGeluTanh, kRelu };

const char* ActivationName(Activation a);

struct ActivationForwardParams {
  DType dtype = DType::kF32;
  Activation kind = Activation::kGeluTanh;
  int64_t n = 0;            // elements
  const void* x = nullptr;  // (n)
  void* out = nullptr;      // (n)
};

struct ActivationBackwardParams {
  DType dtype = DType::kF32;
  Activation kind = Activation::kGeluTanh;
  int64_t n = 0;
  const void* x = nullptr;     // (n), the forward input
  const void* dout = nullptr;  // (n)
  void* dx = nullptr;          // (n), written
};

namespace cpu {
void ActivationForward(const Context& ctx, const ActivationForwardParams& p);
void ActivationBackward(const Context& ctx, const ActivationBackwardParams& p);
}  // namespace cpu

inline void ActivationForward(const Context& ctx, const ActivationForwardParams& p) {
  if (!BackendSupports("activation", ctx.device, p.dtype)) UnsupportedOp("activation", ctx, p.dtype);
  cpu::ActivationForward(ctx, p);
}
inline void ActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  if (!BackendSupports("activation", ctx.device, p.dtype)) UnsupportedOp("activation", ctx, p.dtype);
  cpu::ActivationBackward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_ACTIVATIONS_ACTIVATIONS_H_
