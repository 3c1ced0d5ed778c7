// CUDA gated linear units (SwiGLU, GeGLU), fp32 and bf16 (bf16 storage, fp32 math), forward and backward,
// with the params and row strides of swiglu.h (gate and up may be the halves of one fused buffer). 16 bytes
// per access where H, both row strides and the pointers allow. The gate activations are device_util.cuh's
// (the CPU kernel's formulas).
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/swiglu/swiglu.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// The gate activation's value and derivative at g.
template <Activation kAct>
__device__ __forceinline__ void GateValueAndGrad(float g, float& value, float& grad) {
  if constexpr (kAct == Activation::kSilu) {
    const float s = Sigmoid(g);
    value = g * s;
    grad = s * (1.0f + g * (1.0f - s));
  } else {
    value = GeluTanh(g);
    grad = GeluTanhGrad(g);
  }
}
template <Activation kAct>
__device__ __forceinline__ float GateValue(float g) {
  if constexpr (kAct == Activation::kSilu) return g * Sigmoid(g);
  return GeluTanh(g);
}

// act(gate) * up over (N, H) in vectors of W along H (W > 1 only when H and both row strides are multiples
// of W).
template <typename T, Activation kAct, int W>
__global__ void SwiGluForwardKernel(int64_t N, int64_t H, const T* gate, int64_t gs, const T* up, int64_t us,
                                    T* out) {
  const int64_t hv = H / W;
  LMF_GRID_STRIDE(v, N * hv) {
    const int64_t n = v / hv, h = (v - n * hv) * W;
    float g[W], u[W];
    LoadN<T, W>(gate + n * gs + h, g);
    LoadN<T, W>(up + n * us + h, u);
#pragma unroll
    for (int i = 0; i < W; ++i) g[i] = GateValue<kAct>(g[i]) * u[i];
    StoreN<T, W>(out + n * H + h, g);
  }
}

template <typename T, Activation kAct, int W>
__global__ void SwiGluBackwardKernel(int64_t N, int64_t H, const T* gate, int64_t gs, const T* up, int64_t us,
                                     const T* dout, T* dgate, T* dup) {
  const int64_t hv = H / W;
  LMF_GRID_STRIDE(v, N * hv) {
    const int64_t n = v / hv, h = (v - n * hv) * W;
    float g[W], u[W], d[W];
    LoadN<T, W>(gate + n * gs + h, g);
    LoadN<T, W>(up + n * us + h, u);
    LoadN<T, W>(dout + n * H + h, d);
#pragma unroll
    for (int i = 0; i < W; ++i) {
      float value, grad;
      GateValueAndGrad<kAct>(g[i], value, grad);
      g[i] = d[i] * u[i] * grad;  // dgate
      u[i] = d[i] * value;        // dup
    }
    StoreN<T, W>(dgate + n * gs + h, g);
    StoreN<T, W>(dup + n * us + h, u);
  }
}

template <typename T, Activation kAct>
absl::Status LaunchSwiGlu(const Context& ctx, int64_t N, int64_t H, const void* gate, int64_t gs,
                          const void* up, int64_t us, const void* dout, void* out_or_dgate, void* dup) {
  constexpr int kW = 16 / sizeof(T);
  const bool vec =
      H % kW == 0 && gs % kW == 0 && us % kW == 0 && Aligned16({gate, up, dout, out_or_dgate, dup});
  const int w = vec ? kW : 1;
  const unsigned grid = GridFor(N * (H / w), kThreads);
  const T* g = static_cast<const T*>(gate);
  const T* u = static_cast<const T*>(up);
  if (dout == nullptr) {
    auto* kernel = vec ? SwiGluForwardKernel<T, kAct, kW> : SwiGluForwardKernel<T, kAct, 1>;
    kernel<<<grid, kThreads, 0, StreamOf(ctx)>>>(N, H, g, gs, u, us, static_cast<T*>(out_or_dgate));
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("SwiGluForwardKernel");
  } else {
    auto* kernel = vec ? SwiGluBackwardKernel<T, kAct, kW> : SwiGluBackwardKernel<T, kAct, 1>;
    kernel<<<grid, kThreads, 0, StreamOf(ctx)>>>(N, H, g, gs, u, us, static_cast<const T*>(dout),
                                                 static_cast<T*>(out_or_dgate), static_cast<T*>(dup));
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("SwiGluBackwardKernel");
  }
  return absl::OkStatus();
}

// The launch for p's dtype and gate activation (kSilu or kGeluTanh; anything else is InvalidArgument).
template <typename Params>
absl::Status Launch(const Context& ctx, const Params& p, const void* dout, void* out_or_dgate, void* dup) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "swiglu"));
  if (p.activation != Activation::kSilu && p.activation != Activation::kGeluTanh)
    return absl::InvalidArgumentError(absl::StrCat("gated linear unit: the gate activation must be silu or ",
                                                   "gelu_tanh, not ", ActivationName(p.activation)));
  if (p.N * p.H == 0) return absl::OkStatus();
  const int64_t gs = p.gate_stride ? p.gate_stride : p.H, us = p.up_stride ? p.up_stride : p.H;
  const bool silu = p.activation == Activation::kSilu;
  if (p.dtype == DType::kF32) {
    return silu ? LaunchSwiGlu<float, Activation::kSilu>(ctx, p.N, p.H, p.gate, gs, p.up, us, dout, out_or_dgate, dup)
                : LaunchSwiGlu<float, Activation::kGeluTanh>(ctx, p.N, p.H, p.gate, gs, p.up, us, dout,
                                                             out_or_dgate, dup);
  }
  return silu ? LaunchSwiGlu<bf16, Activation::kSilu>(ctx, p.N, p.H, p.gate, gs, p.up, us, dout, out_or_dgate, dup)
              : LaunchSwiGlu<bf16, Activation::kGeluTanh>(ctx, p.N, p.H, p.gate, gs, p.up, us, dout, out_or_dgate,
                                                          dup);
}

}  // namespace

absl::Status SwiGluForward(const Context& ctx, const SwiGluForwardParams& p) {
  return Launch(ctx, p, nullptr, p.out, nullptr);
}

absl::Status SwiGluBackward(const Context& ctx, const SwiGluBackwardParams& p) {
  if (p.dout == nullptr && p.N * p.H != 0) return absl::InvalidArgumentError("swiglu backward: dout is null");
  return Launch(ctx, p, p.dout, p.dgate, p.dup);
}

}  // namespace lmf::kernels::cuda
