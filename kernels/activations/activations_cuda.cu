// CUDA activations (SiLU, GELU-tanh, ReLU, soft-cap), fp32 and bf16 (bf16 storage, fp32 math), forward and
// backward, with the params and write rules of activations.h. Grid-stride loops, 16 bytes per access where the
// alignment allows, then the tail one element at a time; GELU through device_util.cuh's GeluTanh (the CPU
// kernel's formula, sigmoid(2u), which avoids the cancellation of 1 + tanh(u)); the soft-cap as c (2 s - 1),
// s = sigmoid(2 x / c), and its derivative as 4 s (1 - s), as on the CPU.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/activations/activations.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <Activation kKind>
__device__ __forceinline__ float ActForward(float v, float cap) {
  if constexpr (kKind == Activation::kSilu) {
    return v * Sigmoid(v);
  } else if constexpr (kKind == Activation::kGeluTanh) {
    return GeluTanh(v);
  } else if constexpr (kKind == Activation::kSoftCap) {
    return cap * (2.0f * Sigmoid(2.0f * v / cap) - 1.0f);
  } else {
    return v > 0.0f ? v : 0.0f;
  }
}

template <Activation kKind>
__device__ __forceinline__ float ActBackward(float v, float d, float cap) {
  if constexpr (kKind == Activation::kSilu) {
    const float s = Sigmoid(v);
    return d * s * (1.0f + v * (1.0f - s));
  } else if constexpr (kKind == Activation::kGeluTanh) {
    return d * GeluTanhGrad(v);
  } else if constexpr (kKind == Activation::kSoftCap) {
    const float s = Sigmoid(2.0f * v / cap);
    return d * 4.0f * s * (1.0f - s);
  } else {
    return v > 0.0f ? d : 0.0f;
  }
}

template <typename T, Activation kKind, int W>
__global__ void ActivationForwardKernel(int64_t n, const T* x, T* out, float cap) {
  LMF_GRID_STRIDE(v, n / W) {
    float a[W];
    LoadN<T, W>(x + v * W, a);
#pragma unroll
    for (int i = 0; i < W; ++i) a[i] = ActForward<kKind>(a[i], cap);
    StoreN<T, W>(out + v * W, a);
  }
  LMF_GRID_STRIDE(t, n - n / W * W) {
    const int64_t i = n / W * W + t;
    out[i] = FromFloat<T>(ActForward<kKind>(ToFloat(x[i]), cap));
  }
}

template <typename T, Activation kKind, int W>
__global__ void ActivationBackwardKernel(int64_t n, const T* x, const T* dout, T* dx, float cap) {
  LMF_GRID_STRIDE(v, n / W) {
    float a[W], d[W];
    LoadN<T, W>(x + v * W, a);
    LoadN<T, W>(dout + v * W, d);
#pragma unroll
    for (int i = 0; i < W; ++i) d[i] = ActBackward<kKind>(a[i], d[i], cap);
    StoreN<T, W>(dx + v * W, d);
  }
  LMF_GRID_STRIDE(t, n - n / W * W) {
    const int64_t i = n / W * W + t;
    dx[i] = FromFloat<T>(ActBackward<kKind>(ToFloat(x[i]), ToFloat(dout[i]), cap));
  }
}

template <typename T, Activation kKind, int W>
void ForwardKernel(const Context& ctx, const ActivationForwardParams& p) {
  ActivationForwardKernel<T, kKind, W><<<GridFor(p.n / W + 1, kThreads), kThreads, 0, StreamOf(ctx)>>>(
      p.n, static_cast<const T*>(p.x), static_cast<T*>(p.out), p.cap);
}

template <typename T, int W>
absl::Status LaunchActivationForwardW(const Context& ctx, const ActivationForwardParams& p) {
  switch (p.kind) {
    case Activation::kSilu: ForwardKernel<T, Activation::kSilu, W>(ctx, p); break;
    case Activation::kGeluTanh: ForwardKernel<T, Activation::kGeluTanh, W>(ctx, p); break;
    case Activation::kRelu: ForwardKernel<T, Activation::kRelu, W>(ctx, p); break;
    case Activation::kSoftCap: ForwardKernel<T, Activation::kSoftCap, W>(ctx, p); break;
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("ActivationForwardKernel");
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchActivationForward(const Context& ctx, const ActivationForwardParams& p) {
  return Aligned16({p.x, p.out}) ? LaunchActivationForwardW<T, 16 / sizeof(T)>(ctx, p)
                                 : LaunchActivationForwardW<T, 1>(ctx, p);
}

template <typename T, Activation kKind, int W>
void BackwardKernel(const Context& ctx, const ActivationBackwardParams& p) {
  ActivationBackwardKernel<T, kKind, W><<<GridFor(p.n / W + 1, kThreads), kThreads, 0, StreamOf(ctx)>>>(
      p.n, static_cast<const T*>(p.x), static_cast<const T*>(p.dout), static_cast<T*>(p.dx), p.cap);
}

template <typename T, int W>
absl::Status LaunchActivationBackwardW(const Context& ctx, const ActivationBackwardParams& p) {
  switch (p.kind) {
    case Activation::kSilu: BackwardKernel<T, Activation::kSilu, W>(ctx, p); break;
    case Activation::kGeluTanh: BackwardKernel<T, Activation::kGeluTanh, W>(ctx, p); break;
    case Activation::kRelu: BackwardKernel<T, Activation::kRelu, W>(ctx, p); break;
    case Activation::kSoftCap: BackwardKernel<T, Activation::kSoftCap, W>(ctx, p); break;
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("ActivationBackwardKernel");
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  return Aligned16({p.x, p.dout, p.dx}) ? LaunchActivationBackwardW<T, 16 / sizeof(T)>(ctx, p)
                                        : LaunchActivationBackwardW<T, 1>(ctx, p);
}

// kSoftCap's c: finite and > 0.
absl::Status CheckCap(Activation kind, float cap) {
  if (kind != Activation::kSoftCap || (cap > 0.0f && std::isfinite(cap))) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("activation softcap: cap=", cap, " must be finite and > 0"));
}

}  // namespace

absl::Status ActivationForward(const Context& ctx, const ActivationForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "activation"));
  LMF_RETURN_IF_ERROR_STATUS(CheckCap(p.kind, p.cap));
  if (p.n == 0) return absl::OkStatus();
  return p.dtype == DType::kF32 ? LaunchActivationForward<float>(ctx, p)
                                : LaunchActivationForward<bf16>(ctx, p);
}

absl::Status ActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "activation"));
  LMF_RETURN_IF_ERROR_STATUS(CheckCap(p.kind, p.cap));
  if (p.n == 0) return absl::OkStatus();
  return p.dtype == DType::kF32 ? LaunchActivationBackward<float>(ctx, p)
                                : LaunchActivationBackward<bf16>(ctx, p);
}

}  // namespace lmf::kernels::cuda
