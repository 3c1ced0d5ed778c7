// CUDA elementwise kernels: activations, SwiGLU, RoPE, residual add; see pointwise.h. Grid-stride loops,
// 16 bytes per access where sizes and alignment allow (else one element; one rotation pair for RoPE); the
// formulas are the CPU kernels' (GELU through s = sigmoid(2u), which avoids the cancellation of 1 + tanh(u)).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "lab/cuda/pointwise.h"
#include "kernels/cuda/scratch.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

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

// 1-D kernels: W elements per access over the first n / W * W elements (16-byte accesses when W > 1), then
// the tail one at a time.
#define LMF_GRID_STRIDE(i, count)                                                            \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

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

// SwiGLU over (N, H) in vectors of W along H (W > 1 only when H and both row strides are multiples of W).
template <typename T, int W>
__global__ void SwiGluForwardKernel(int64_t N, int64_t H, const T* gate, int64_t gs, const T* up, int64_t us,
                                    T* out) {
  const int64_t hv = H / W;
  LMF_GRID_STRIDE(v, N * hv) {
    const int64_t n = v / hv, h = (v - n * hv) * W;
    float g[W], u[W];
    LoadN<T, W>(gate + n * gs + h, g);
    LoadN<T, W>(up + n * us + h, u);
#pragma unroll
    for (int i = 0; i < W; ++i) g[i] = g[i] * Sigmoid(g[i]) * u[i];
    StoreN<T, W>(out + n * H + h, g);
  }
}

template <typename T, int W>
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
      const float s = Sigmoid(g[i]);
      const float dg = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
      u[i] = d[i] * g[i] * s;  // dup
      g[i] = dg;
    }
    StoreN<T, W>(dgate + n * gs + h, g);
    StoreN<T, W>(dup + n * us + h, u);
  }
}

// cos/sin of position * theta^(-2i/HS) for rows of positions (rows = T shared, or B * T), in double.
__global__ void RopeTableKernel(int64_t rows, int64_t T, int64_t half, int64_t HS, double theta,
                                const int32_t* positions, int64_t positions_stride_b, float sign, float* cs,
                                float* sn) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * half;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / half, k = i - r * half;
    double pos = static_cast<double>(r % T);
    if (positions != nullptr) pos = positions[(r / T) * positions_stride_b + r % T];
    const double angle = pos * pow(theta, -2.0 * static_cast<double>(k) / static_cast<double>(HS));
    cs[i] = static_cast<float>(cos(angle));
    sn[i] = sign * static_cast<float>(sin(angle));
  }
}

template <typename T>
__global__ void RopeRotateKernel(RopeParams p, bool per_batch, const float* cs, const float* sn) {
  const int64_t half = p.HS / 2;
  const int64_t total = p.B * p.T * p.NH * half;
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = i;
    const int64_t k = r % half;
    r /= half;
    const int64_t h = r % p.NH;
    r /= p.NH;
    const int64_t t = r % p.T;
    const int64_t b = r / p.T;
    const int64_t row = per_batch ? b * p.T + t : t;
    const float c = cs[row * half + k], s = sn[row * half + k];
    const T* x = in + b * p.in_stride_b + t * p.in_stride_t + h * p.in_stride_h + 2 * k;
    T* y = out + b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h + 2 * k;
    const float x0 = ToFloat(x[0]), x1 = ToFloat(x[1]);
    y[0] = FromFloat<T>(x0 * c - x1 * s);
    y[1] = FromFloat<T>(x0 * s + x1 * c);
  }
}

template <typename T, int W>
__global__ void ResidualForwardKernel(int64_t n, const T* a, const T* b, T* out) {
  LMF_GRID_STRIDE(v, n / W) {
    float x[W], y[W];
    LoadN<T, W>(a + v * W, x);
    LoadN<T, W>(b + v * W, y);
#pragma unroll
    for (int i = 0; i < W; ++i) x[i] += y[i];
    StoreN<T, W>(out + v * W, x);
  }
  LMF_GRID_STRIDE(t, n - n / W * W) {
    const int64_t i = n / W * W + t;
    out[i] = FromFloat<T>(ToFloat(a[i]) + ToFloat(b[i]));
  }
}

template <typename T>
__global__ void ResidualBackwardKernel(int64_t n, const T* dout, T* da, T* db) {
  LMF_GRID_STRIDE(i, n) {
    const float d = ToFloat(dout[i]);
    if (da != nullptr) da[i] = FromFloat<T>(ToFloat(da[i]) + d);
    if (db != nullptr) db[i] = FromFloat<T>(ToFloat(db[i]) + d);
  }
}

absl::Status CheckDType(DType t, const char* op) {
  if (t == DType::kF32 || t == DType::kBF16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": CUDA runs f32 and bf16, not ", DTypeName(t)));
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

template <typename T>
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
    auto* kernel = vec ? SwiGluForwardKernel<T, kW> : SwiGluForwardKernel<T, 1>;
    kernel<<<grid, kThreads, 0, StreamOf(ctx)>>>(N, H, g, gs, u, us, static_cast<T*>(out_or_dgate));
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("SwiGluForwardKernel");
  } else {
    auto* kernel = vec ? SwiGluBackwardKernel<T, kW> : SwiGluBackwardKernel<T, 1>;
    kernel<<<grid, kThreads, 0, StreamOf(ctx)>>>(N, H, g, gs, u, us, static_cast<const T*>(dout),
                                                 static_cast<T*>(out_or_dgate), static_cast<T*>(dup));
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("SwiGluBackwardKernel");
  }
  return absl::OkStatus();
}

absl::Status Rope(const Context& ctx, const RopeParams& p, float sign) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "rope"));
  if (p.HS % 2 != 0) return absl::InvalidArgumentError(absl::StrCat("rope: head size ", p.HS, " is odd"));
  const int64_t half = p.HS / 2;
  if (p.B * p.T * p.NH * half == 0) return absl::OkStatus();
  const bool per_batch = p.positions != nullptr && p.positions_stride_b != 0;
  const int64_t rows = per_batch ? p.B * p.T : p.T;
  Scratch table;
  LMF_RETURN_IF_ERROR_STATUS(table.Allocate(ctx, sizeof(float) * 2 * rows * half));
  float* cs = table.get<float>();
  float* sn = cs + rows * half;
  RopeTableKernel<<<GridFor(rows * half, kThreads), kThreads, 0, StreamOf(ctx)>>>(
      rows, p.T, half, p.HS, static_cast<double>(p.theta), p.positions, p.positions_stride_b, sign, cs, sn);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("RopeTableKernel");
  const unsigned grid = GridFor(p.B * p.T * p.NH * half, kThreads);
  if (p.dtype == DType::kF32) {
    RopeRotateKernel<float><<<grid, kThreads, 0, StreamOf(ctx)>>>(p, per_batch, cs, sn);
  } else {
    RopeRotateKernel<bf16><<<grid, kThreads, 0, StreamOf(ctx)>>>(p, per_batch, cs, sn);
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("RopeRotateKernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status ActivationForward(const Context& ctx, const ActivationForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "activation"));
  if (p.n == 0) return absl::OkStatus();
  return p.dtype == DType::kF32 ? LaunchActivationForward<float>(ctx, p)
                                : LaunchActivationForward<bf16>(ctx, p);
}

absl::Status ActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "activation"));
  if (p.n == 0) return absl::OkStatus();
  return p.dtype == DType::kF32 ? LaunchActivationBackward<float>(ctx, p)
                                : LaunchActivationBackward<bf16>(ctx, p);
}

absl::Status SwiGluForward(const Context& ctx, const SwiGluForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "swiglu"));
  if (p.N * p.H == 0) return absl::OkStatus();
  const int64_t gs = p.gate_stride ? p.gate_stride : p.H, us = p.up_stride ? p.up_stride : p.H;
  return p.dtype == DType::kF32
             ? LaunchSwiGlu<float>(ctx, p.N, p.H, p.gate, gs, p.up, us, nullptr, p.out, nullptr)
             : LaunchSwiGlu<bf16>(ctx, p.N, p.H, p.gate, gs, p.up, us, nullptr, p.out, nullptr);
}

absl::Status SwiGluBackward(const Context& ctx, const SwiGluBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "swiglu"));
  if (p.N * p.H == 0) return absl::OkStatus();
  if (p.dout == nullptr) return absl::InvalidArgumentError("swiglu backward: dout is null");
  const int64_t gs = p.gate_stride ? p.gate_stride : p.H, us = p.up_stride ? p.up_stride : p.H;
  return p.dtype == DType::kF32
             ? LaunchSwiGlu<float>(ctx, p.N, p.H, p.gate, gs, p.up, us, p.dout, p.dgate, p.dup)
             : LaunchSwiGlu<bf16>(ctx, p.N, p.H, p.gate, gs, p.up, us, p.dout, p.dgate, p.dup);
}

absl::Status RopeForward(const Context& ctx, const RopeParams& p) { return Rope(ctx, p, 1.0f); }
absl::Status RopeBackward(const Context& ctx, const RopeParams& p) { return Rope(ctx, p, -1.0f); }

absl::Status ResidualForward(const Context& ctx, const ResidualForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "residual"));
  if (p.n == 0) return absl::OkStatus();
  const bool vec = Aligned16({p.a, p.b, p.out});
  if (p.dtype == DType::kF32) {
    auto* kernel = vec ? ResidualForwardKernel<float, 4> : ResidualForwardKernel<float, 1>;
    kernel<<<GridFor(p.n / (vec ? 4 : 1) + 1, kThreads), kThreads, 0, StreamOf(ctx)>>>(
        p.n, static_cast<const float*>(p.a), static_cast<const float*>(p.b), static_cast<float*>(p.out));
  } else {
    auto* kernel = vec ? ResidualForwardKernel<bf16, 8> : ResidualForwardKernel<bf16, 1>;
    kernel<<<GridFor(p.n / (vec ? 8 : 1) + 1, kThreads), kThreads, 0, StreamOf(ctx)>>>(
        p.n, static_cast<const bf16*>(p.a), static_cast<const bf16*>(p.b), static_cast<bf16*>(p.out));
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("ResidualForwardKernel");
  return absl::OkStatus();
}

absl::Status ResidualBackward(const Context& ctx, const ResidualBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "residual"));
  if (p.n == 0) return absl::OkStatus();
  const unsigned grid = GridFor(p.n, kThreads);
  if (p.dtype == DType::kF32) {
    ResidualBackwardKernel<float><<<grid, kThreads, 0, StreamOf(ctx)>>>(
        p.n, static_cast<const float*>(p.dout), static_cast<float*>(p.da), static_cast<float*>(p.db));
  } else {
    ResidualBackwardKernel<bf16><<<grid, kThreads, 0, StreamOf(ctx)>>>(
        p.n, static_cast<const bf16*>(p.dout), static_cast<bf16*>(p.da), static_cast<bf16*>(p.db));
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("ResidualBackwardKernel");
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda
