// CUDA residual add, fp32 and bf16, with the write rules of residual.h: forward writes out = a + b,
// backward accumulates dout into da and db. 16 bytes per access in the forward where the alignment allows.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/residual/residual.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;

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

}  // namespace

absl::Status ResidualForward(const Context& ctx, const ResidualForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "residual"));
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
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "residual"));
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
