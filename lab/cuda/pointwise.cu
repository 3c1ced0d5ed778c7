// CUDA elementwise kernels: activations, SwiGLU, RoPE, residual add; see pointwise.h. Grid-stride loops,
// one element (one rotation pair for RoPE) per thread per iteration; the formulas are the CPU kernels'
// (GELU through s = sigmoid(2u), which avoids the cancellation of 1 + tanh(u)).
#include "lab/cuda/pointwise.h"

#include "lab/cuda/cuda_check.h"
#include "lab/cuda/device_util.cuh"
#include "lab/cuda/scratch.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

template <typename T, Activation kKind>
__global__ void ActivationForwardKernel(int64_t n, const T* x, T* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = ToFloat(x[i]);
    float y;
    if constexpr (kKind == Activation::kSilu) {
      y = v * Sigmoid(v);
    } else if constexpr (kKind == Activation::kGeluTanh) {
      y = v * Sigmoid(2.0f * kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    } else {
      y = v > 0.0f ? v : 0.0f;
    }
    out[i] = FromFloat<T>(y);
  }
}

template <typename T, Activation kKind>
__global__ void ActivationBackwardKernel(int64_t n, const T* x, const T* dout, T* dx) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = ToFloat(x[i]), d = ToFloat(dout[i]);
    float g;
    if constexpr (kKind == Activation::kSilu) {
      const float s = Sigmoid(v);
      g = d * s * (1.0f + v * (1.0f - s));
    } else if constexpr (kKind == Activation::kGeluTanh) {
      const float s = Sigmoid(2.0f * kSqrt2OverPi * (v + kGeluCubic * v * v * v));
      const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
      g = d * (s + 2.0f * v * s * (1.0f - s) * du);
    } else {
      g = v > 0.0f ? d : 0.0f;
    }
    dx[i] = FromFloat<T>(g);
  }
}

template <typename T>
__global__ void SwiGluForwardKernel(int64_t N, int64_t H, const T* gate, int64_t gs, const T* up, int64_t us, T* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < N * H;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / H, h = i - n * H;
    const float g = ToFloat(gate[n * gs + h]), u = ToFloat(up[n * us + h]);
    out[i] = FromFloat<T>(g * Sigmoid(g) * u);
  }
}

template <typename T>
__global__ void SwiGluBackwardKernel(int64_t N, int64_t H, const T* gate, int64_t gs, const T* up, int64_t us,
                                     const T* dout, T* dgate, T* dup) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < N * H;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / H, h = i - n * H;
    const float g = ToFloat(gate[n * gs + h]), u = ToFloat(up[n * us + h]), d = ToFloat(dout[i]);
    const float s = Sigmoid(g);
    dgate[n * gs + h] = FromFloat<T>(d * u * s * (1.0f + g * (1.0f - s)));
    dup[n * us + h] = FromFloat<T>(d * g * s);
  }
}

// cos/sin of position * theta^(-2i/HS) for rows of positions (rows = T shared, or B * T), in double.
__global__ void RopeTableKernel(int64_t rows, int64_t T, int64_t half, int64_t HS, double theta, const int32_t* positions,
                                int64_t positions_stride_b, float sign, float* cs, float* sn) {
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

template <typename T>
__global__ void ResidualForwardKernel(int64_t n, const T* a, const T* b, T* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = FromFloat<T>(ToFloat(a[i]) + ToFloat(b[i]));
}

template <typename T>
__global__ void ResidualBackwardKernel(int64_t n, const T* dout, T* da, T* db) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float d = ToFloat(dout[i]);
    if (da != nullptr) da[i] = FromFloat<T>(ToFloat(da[i]) + d);
    if (db != nullptr) db[i] = FromFloat<T>(ToFloat(db[i]) + d);
  }
}

absl::Status CheckDType(DType t, const char* op) {
  if (t == DType::kF32 || t == DType::kBF16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": CUDA runs f32 and bf16, not ", DTypeName(t)));
}

template <typename T>
absl::Status LaunchActivationForward(const Context& ctx, const ActivationForwardParams& p) {
  const unsigned grid = GridFor(p.n, kThreads);
  const T* x = static_cast<const T*>(p.x);
  T* out = static_cast<T*>(p.out);
  switch (p.kind) {
    case Activation::kSilu:
      ActivationForwardKernel<T, Activation::kSilu><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, out);
      break;
    case Activation::kGeluTanh:
      ActivationForwardKernel<T, Activation::kGeluTanh><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, out);
      break;
    case Activation::kRelu:
      ActivationForwardKernel<T, Activation::kRelu><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, out);
      break;
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("ActivationForwardKernel");
  return absl::OkStatus();
}

template <typename T>
absl::Status LaunchActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  const unsigned grid = GridFor(p.n, kThreads);
  const T* x = static_cast<const T*>(p.x);
  const T* d = static_cast<const T*>(p.dout);
  T* dx = static_cast<T*>(p.dx);
  switch (p.kind) {
    case Activation::kSilu:
      ActivationBackwardKernel<T, Activation::kSilu><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, d, dx);
      break;
    case Activation::kGeluTanh:
      ActivationBackwardKernel<T, Activation::kGeluTanh><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, d, dx);
      break;
    case Activation::kRelu:
      ActivationBackwardKernel<T, Activation::kRelu><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, x, d, dx);
      break;
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("ActivationBackwardKernel");
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
  return p.dtype == DType::kF32 ? LaunchActivationForward<float>(ctx, p) : LaunchActivationForward<bf16>(ctx, p);
}

absl::Status ActivationBackward(const Context& ctx, const ActivationBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "activation"));
  if (p.n == 0) return absl::OkStatus();
  return p.dtype == DType::kF32 ? LaunchActivationBackward<float>(ctx, p) : LaunchActivationBackward<bf16>(ctx, p);
}

absl::Status SwiGluForward(const Context& ctx, const SwiGluForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "swiglu"));
  if (p.N * p.H == 0) return absl::OkStatus();
  const int64_t gs = p.gate_stride ? p.gate_stride : p.H, us = p.up_stride ? p.up_stride : p.H;
  const unsigned grid = GridFor(p.N * p.H, kThreads);
  if (p.dtype == DType::kF32) {
    SwiGluForwardKernel<float><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.N, p.H, static_cast<const float*>(p.gate), gs,
                                                                       static_cast<const float*>(p.up), us,
                                                                       static_cast<float*>(p.out));
  } else {
    SwiGluForwardKernel<bf16><<<grid, kThreads, 0, StreamOf(ctx)>>>(p.N, p.H, static_cast<const bf16*>(p.gate), gs,
                                                                      static_cast<const bf16*>(p.up), us,
                                                                      static_cast<bf16*>(p.out));
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("SwiGluForwardKernel");
  return absl::OkStatus();
}

absl::Status SwiGluBackward(const Context& ctx, const SwiGluBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "swiglu"));
  if (p.N * p.H == 0) return absl::OkStatus();
  const int64_t gs = p.gate_stride ? p.gate_stride : p.H, us = p.up_stride ? p.up_stride : p.H;
  const unsigned grid = GridFor(p.N * p.H, kThreads);
  if (p.dtype == DType::kF32) {
    SwiGluBackwardKernel<float><<<grid, kThreads, 0, StreamOf(ctx)>>>(
        p.N, p.H, static_cast<const float*>(p.gate), gs, static_cast<const float*>(p.up), us,
        static_cast<const float*>(p.dout), static_cast<float*>(p.dgate), static_cast<float*>(p.dup));
  } else {
    SwiGluBackwardKernel<bf16><<<grid, kThreads, 0, StreamOf(ctx)>>>(
        p.N, p.H, static_cast<const bf16*>(p.gate), gs, static_cast<const bf16*>(p.up), us,
        static_cast<const bf16*>(p.dout), static_cast<bf16*>(p.dgate), static_cast<bf16*>(p.dup));
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("SwiGluBackwardKernel");
  return absl::OkStatus();
}

absl::Status RopeForward(const Context& ctx, const RopeParams& p) { return Rope(ctx, p, 1.0f); }
absl::Status RopeBackward(const Context& ctx, const RopeParams& p) { return Rope(ctx, p, -1.0f); }

absl::Status ResidualForward(const Context& ctx, const ResidualForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckDType(p.dtype, "residual"));
  if (p.n == 0) return absl::OkStatus();
  const unsigned grid = GridFor(p.n, kThreads);
  if (p.dtype == DType::kF32) {
    ResidualForwardKernel<float><<<grid, kThreads, 0, StreamOf(ctx)>>>(
        p.n, static_cast<const float*>(p.a), static_cast<const float*>(p.b), static_cast<float*>(p.out));
  } else {
    ResidualForwardKernel<bf16><<<grid, kThreads, 0, StreamOf(ctx)>>>(
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
