// CUDA activations (SiLU, GELU-tanh, ReLU), fp32 and bf16 (bf16 storage, fp32 math), forward and backward,
// with the params and write rules of activations.h. Grid-stride loops, 16 bytes per access where the
// alignment allows, then the tail one element at a time; GELU through s = sigmoid(2u) (the CPU kernel's
// formula, which avoids the cancellation of 1 + tanh(u)).
#include "kernels/activations/activations.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

template <Activation kKind>
__device__ __forceinline__ float ActForward(float v) {
  if constexpr (kKind == Activation::kSilu) {
    return v * Sigmoid(v);
  } else if constexpr (kKind == Activation::kGeluTanh) {
    return v * Sigmoid(2.0f * kSqrt2OverPi * (v + kGeluCubic * v * v * v));
  } else {
    return v > 0.0f ? v : 0.0f;
  }
}

template <Activation kKind>
__device__ __forceinline__ float ActBackward(float v, float d) {
  if constexpr (kKind == Activation::kSilu) {
    const float s = Sigmoid(v);
    return d * s * (1.0f + v * (1.0f - s));
  } else if constexpr (kKind == Activation::kGeluTanh) {
    const float s = Sigmoid(2.0f * kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    return d * (s + 2.0f * v * s * (1.0f - s) * du);
  } else {
    return v > 0.0f ? d : 0.0f;
  }
}

template <typename T, Activation kKind, int W>
__global__ void ActivationForwardKernel(int64_t n, const T* x, T* out) {
  LMF_GRID_STRIDE(v, n / W) {
    float a[W];
    LoadN<T, W>(x + v * W, a);
#pragma unroll
    for (int i = 0; i < W; ++i) a[i] = ActForward<kKind>(a[i]);
    StoreN<T, W>(out + v * W, a);
  }
  LMF_GRID_STRIDE(t, n - n / W * W) {
    const int64_t i = n / W * W + t;
    out[i] = FromFloat<T>(ActForward<kKind>(ToFloat(x[i])));
  }
}

template <typename T, Activation kKind, int W>
__global__ void ActivationBackwardKernel(int64_t n, const T* x, const T* dout, T* dx) {
  LMF_GRID_STRIDE(v, n / W) {
    float a[W], d[W];
    LoadN<T, W>(x + v * W, a);
    LoadN<T, W>(dout + v * W, d);
#pragma unroll
    for (int i = 0; i < W; ++i) d[i] = ActBackward<kKind>(a[i], d[i]);
    StoreN<T, W>(dx + v * W, d);
  }
  LMF_GRID_STRIDE(t, n - n / W * W) {
    const int64_t i = n / W * W + t;
    dx[i] = FromFloat<T>(ActBackward<kKind>(ToFloat(x[i]), ToFloat(dout[i])));
  }
}

template <typename T, int W>
absl::Status LaunchActivationForwardW(const Context& ctx, const ActivationForwardParams& p) {
  const unsigned grid = GridFor(p.n / W + 1, kThreads);
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  switch (p.kind) {
    case Activation::kSilu:
      ActivationForwardKernel<T, Activation::kSilu, W><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, out);
      break;
    case Activation::kGeluTanh:
      ActivationForwardKernel<T, Activation::kGeluTanh, W><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, out);
      break;
    case Activation::kRelu:
      ActivationForwardKernel<T, Activation::kRelu, W><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, out);
      break;
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("ActivationForwardKernel");
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchActivationForward(const Context& ctx, const ActivationForwardParams& p) {
  return Aligned16({p.x, p.out}) ? LaunchActivationForwardW<T, 16 / sizeof(T)>(ctx, p)
                                 : LaunchActivationForwardW<T, 1>(ctx, p);
}

template <typename T, int W>
absl::Status LaunchActivationBackwardW(const Context& ctx, const ActivationBackwardParams& p) {
  const unsigned grid = GridFor(p.n / W + 1, kThreads);
  const T* x = static_cast<const T*>(p.x);
  const T* d = static_cast<const T*>(p.dout);
  T* dx = static_cast<T*>(p.dx);
  switch (p.kind) {
    case Activation::kSilu:
      ActivationBackwardKernel<T, Activation::kSilu, W><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, d, dx);
      break;
    case Activation::kGeluTanh:
      ActivationBackwardKernel<T, Activation::kGeluTanh, W>
          <<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, d, dx);
      break;
    case Activation::kRelu:
      ActivationBackwardKernel<T, Activation::kRelu, W><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, d, dx);
      break;
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("ActivationBackwardKernel");
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  return Aligned16({p.x, p.dout, p.dx}) ? LaunchActivationBackwardW<T, 16 / sizeof(T)>(ctx, p)
                                        : LaunchActivationBackwardW<T, 1>(ctx, p);
}

}  // namespace

absl::Status ActivationForward(const Context& ctx, const ActivationForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "activation"));
  if (p.n == 0) return absl::OkStatus();
  return p.dtype == DType::kF32 ? LaunchActivationForward<float>(ctx, p)
                                : LaunchActivationForward<bf16>(ctx, p);
}

absl::Status ActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "activation"));
  if (p.n == 0) return absl::OkStatus();
  return p.dtype == DType::kF32 ? LaunchActivationBackward<float>(ctx, p)
                                : LaunchActivationBackward<bf16>(ctx, p);
}

}  // namespace lmf::kernels::cuda
