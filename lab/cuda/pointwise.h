// CUDA elementwise ops, fp32 and bf16 (bf16 storage, fp32 math), with the params structs and write rules of
// the CPU kernels: activations (SiLU, GELU-tanh, ReLU; kernels/activations), SwiGLU gating with row strides
// (kernels/swiglu), RoPE with (b, t, h) strides and optional positions (kernels/rope; cos/sin tables in
// double rounded once, as the CPU kernel), and the residual add (kernels/residual: backward accumulates).
#ifndef LMFORGE_LAB_CUDA_POINTWISE_H_
#define LMFORGE_LAB_CUDA_POINTWISE_H_

#include "absl/status/status.h"
#include "kernels/activations/activations.h"
#include "kernels/core/context.h"
#include "kernels/residual/residual.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"

namespace lmf::kernels::cuda {

absl::Status ActivationForward(const Context& ctx, const ActivationForwardParams& p);
absl::Status ActivationBackward(const Context& ctx, const ActivationBackwardParams& p);
absl::Status SwiGluForward(const Context& ctx, const SwiGluForwardParams& p);
absl::Status SwiGluBackward(const Context& ctx, const SwiGluBackwardParams& p);
absl::Status RopeForward(const Context& ctx, const RopeParams& p);
absl::Status RopeBackward(const Context& ctx, const RopeParams& p);  // in = dout, out = dx
absl::Status ResidualForward(const Context& ctx, const ResidualForwardParams& p);
absl::Status ResidualBackward(const Context& ctx, const ResidualBackwardParams& p);

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_LAB_CUDA_POINTWISE_H_
