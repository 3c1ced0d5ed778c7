// The RMSNorm and LayerNorm CUDA kernels, shared by kernels/rmsnorm/rmsnorm_cuda.cu and
// kernels/layernorm/layernorm_cuda.cu (device code: include from .cu files only). One template per pass,
// kLayer selecting LayerNorm (mean and bias) or RMSNorm, kResidual the fused residual-add forward.
// One warp per row (4 rows per 128-thread block), 16-byte accesses where the row length and alignment allow:
// statistics in fp32 with a fixed-order warp reduction, LayerNorm variance in two passes (mean first), as
// the CPU kernels. The second and third passes re-read the row from L1/L2. Parameter gradients: per-chunk
// column sums into scratch memory, then a fixed-order sum over chunks (no atomics: bitwise reproducible).
#ifndef LMFORGE_KERNELS_CUDA_NORM_KERNELS_CUH_
#define LMFORGE_KERNELS_CUDA_NORM_KERNELS_CUH_

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scratch.h"

namespace lmf::kernels::cuda::norm_internal {

inline constexpr int kRowsPerBlock = 4;
inline constexpr int kThreads = 32 * kRowsPerBlock;

// W elements per access: 16 bytes (W = 16 / sizeof(T)) when C is a multiple of W and the pointers are
// aligned, else 1. Lane l handles elements [l W, l W + W) of every 32 W.
template <typename T, bool kLayer, bool kResidual, int W>
__global__ void NormForwardKernel(int64_t N, int C, float eps, const T* residual, const T* x, T* residual_out,
                                  const T* w, const T* b, T* out, float* mean_out, float* rstd_out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const int64_t base = row * C;
  float sum = 0.0f;
  for (int c = lane * W; c < C; c += 32 * W) {
    float v[W];
    if constexpr (kResidual) {
      float r[W];
      LoadN<T, W>(residual + base + c, r);
      LoadN<T, W>(x + base + c, v);
#pragma unroll
      for (int i = 0; i < W; ++i) v[i] = ToFloat(FromFloat<T>(r[i] + v[i]));  // the stored (rounded) sum
      StoreN<T, W>(residual_out + base + c, v);
    } else {
      LoadN<T, W>(x + base + c, v);
    }
#pragma unroll
    for (int i = 0; i < W; ++i) sum += kLayer ? v[i] : v[i] * v[i];
  }
  const T* src = kResidual ? residual_out : x;
  sum = WarpSum(sum);
  float mean = 0.0f, var;
  if constexpr (kLayer) {
    mean = sum / C;
    float sq = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
      float v[W];
      LoadN<T, W>(src + base + c, v);
#pragma unroll
      for (int i = 0; i < W; ++i) sq += (v[i] - mean) * (v[i] - mean);
    }
    var = WarpSum(sq) / C;
  } else {
    var = sum / C;
  }
  const float rstd = 1.0f / sqrtf(var + eps);
  if (lane == 0) {
    if (rstd_out != nullptr) rstd_out[row] = rstd;
    if (kLayer && mean_out != nullptr) mean_out[row] = mean;
  }
  for (int c = lane * W; c < C; c += 32 * W) {
    float v[W], wv[W], bv[W];
    LoadN<T, W>(src + base + c, v);
    LoadN<T, W>(w + c, wv);
    if (kLayer && b != nullptr) LoadN<T, W>(b + c, bv);
#pragma unroll
    for (int i = 0; i < W; ++i) {
      v[i] = (v[i] - mean) * rstd * wv[i];
      if (kLayer && b != nullptr) v[i] += bv[i];
    }
    StoreN<T, W>(out + base + c, v);
  }
}

template <typename T, bool kLayer, int W>
__global__ void NormBackwardDxKernel(int64_t N, int C, const T* x, const T* w, const float* mean,
                                     const float* rstd, const T* dout, T* dx) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const int64_t base = row * C;
  const float r = rstd[row];
  const float mu = kLayer ? mean[row] : 0.0f;
  float sum_g = 0.0f, sum_gx = 0.0f;  // sum g, sum g * xhat (LayerNorm); sum g * x (RMSNorm)
  for (int c = lane * W; c < C; c += 32 * W) {
    float d[W], wv[W], xv[W];
    LoadN<T, W>(dout + base + c, d);
    LoadN<T, W>(w + c, wv);
    LoadN<T, W>(x + base + c, xv);
#pragma unroll
    for (int i = 0; i < W; ++i) {
      const float g = d[i] * wv[i];
      if constexpr (kLayer) {
        sum_g += g;
        sum_gx += g * (xv[i] - mu) * r;
      } else {
        sum_gx += g * xv[i];
      }
    }
  }
  sum_gx = WarpSum(sum_gx);
  if constexpr (kLayer) sum_g = WarpSum(sum_g);
  const float mean_g = sum_g / C, mean_gx = sum_gx / C;
  for (int c = lane * W; c < C; c += 32 * W) {
    float d[W], wv[W], xv[W];
    LoadN<T, W>(dout + base + c, d);
    LoadN<T, W>(w + c, wv);
    LoadN<T, W>(x + base + c, xv);
#pragma unroll
    for (int i = 0; i < W; ++i) {
      const float g = d[i] * wv[i];
      if constexpr (kLayer) {
        d[i] = r * (g - mean_g - (xv[i] - mu) * r * mean_gx);
      } else {
        d[i] = r * (g - xv[i] * (r * r * mean_gx));
      }
    }
    StoreN<T, W>(dx + base + c, d);
  }
}

template <typename T, bool kLayer>
__global__ void NormParamGradPartialKernel(int64_t N, int C, int64_t rows_per_chunk, const T* x,
                                           const float* mean, const float* rstd, const T* dout,
                                           float* partial_w, float* partial_b) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  const int64_t r1 = min(N, r0 + rows_per_chunk);
  float aw = 0.0f, ab = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const float d = ToFloat(dout[r * C + c]);
    const float xv = ToFloat(x[r * C + c]);
    const float xhat = kLayer ? (xv - mean[r]) * rstd[r] : xv * rstd[r];
    aw += d * xhat;
    ab += d;
  }
  partial_w[static_cast<int64_t>(blockIdx.y) * C + c] = aw;
  if (partial_b != nullptr) partial_b[static_cast<int64_t>(blockIdx.y) * C + c] = ab;
}

// out[c] += sum over chunks k (in order) of partial[k, c] (Acc = float; a template so that every .cu that
// includes this header has its own instantiation).
template <typename Acc>
__global__ void AccumulateChunksKernel(int C, int chunks, const Acc* partial, Acc* out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  Acc s = 0;
  for (int k = 0; k < chunks; ++k) s += partial[static_cast<int64_t>(k) * C + c];
  out[c] += s;
}

template <typename T, bool kLayer, bool kResidual>
absl::Status LaunchForward(const Context& ctx, int64_t N, int64_t C, float eps, const void* residual,
                           const void* x, void* residual_out, const void* w, const void* b, void* out,
                           float* mean, float* rstd) {
  if (N == 0) return absl::OkStatus();
  const unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  constexpr int kW = 16 / sizeof(T);
  const bool vec = C % kW == 0 && Aligned16({residual, x, residual_out, w, b, out});
  auto* kernel =
      vec ? NormForwardKernel<T, kLayer, kResidual, kW> : NormForwardKernel<T, kLayer, kResidual, 1>;
  kernel<<<blocks, kThreads, 0, StreamOf(ctx)>>>(N, static_cast<int>(C), eps, static_cast<const T*>(residual),
                                                 static_cast<const T*>(x), static_cast<T*>(residual_out),
                                                 static_cast<const T*>(w), static_cast<const T*>(b),
                                                 static_cast<T*>(out), mean, rstd);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("NormForwardKernel");
  return absl::OkStatus();
}

template <typename T, bool kLayer>
absl::Status LaunchBackward(const Context& ctx, int64_t N, int64_t C, const void* x, const void* w,
                            const float* mean, const float* rstd, const void* dout, void* dx, void* dweight,
                            void* dbias) {
  if (N == 0) return absl::OkStatus();
  const cudaStream_t stream = StreamOf(ctx);
  // Parameter gradients first: dx may alias dout.
  if (dweight != nullptr || dbias != nullptr) {
    const int64_t chunks = std::min<int64_t>(N, 256);
    const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
    Scratch scratch;
    const bool want_b = kLayer && dbias != nullptr;
    LMF_RETURN_IF_ERROR_STATUS(scratch.Allocate(ctx, sizeof(float) * chunks * C * (want_b ? 2 : 1)));
    float* pw = scratch.get<float>();
    float* pb = want_b ? pw + chunks * C : nullptr;
    const dim3 grid(static_cast<unsigned>((C + 127) / 128), static_cast<unsigned>(chunks));
    NormParamGradPartialKernel<T, kLayer><<<grid, 128, 0, stream>>>(N, static_cast<int>(C), rows_per_chunk,
                                                                    static_cast<const T*>(x), mean, rstd,
                                                                    static_cast<const T*>(dout), pw, pb);
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("NormParamGradPartialKernel");
    const unsigned cblocks = static_cast<unsigned>((C + 255) / 256);
    if (dweight != nullptr) {
      AccumulateChunksKernel<float><<<cblocks, 256, 0, stream>>>(
          static_cast<int>(C), static_cast<int>(chunks), pw, static_cast<float*>(dweight));
      LMF_CUDA_RETURN_IF_LAUNCH_ERROR("AccumulateChunksKernel");
    }
    if (want_b) {
      AccumulateChunksKernel<float><<<cblocks, 256, 0, stream>>>(
          static_cast<int>(C), static_cast<int>(chunks), pb, static_cast<float*>(dbias));
      LMF_CUDA_RETURN_IF_LAUNCH_ERROR("AccumulateChunksKernel");
    }
  }
  const unsigned blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  constexpr int kW = 16 / sizeof(T);
  const bool vec = C % kW == 0 && Aligned16({x, w, dout, dx});
  auto* kernel = vec ? NormBackwardDxKernel<T, kLayer, kW> : NormBackwardDxKernel<T, kLayer, 1>;
  kernel<<<blocks, kThreads, 0, stream>>>(N, static_cast<int>(C), static_cast<const T*>(x),
                                          static_cast<const T*>(w), mean, rstd, static_cast<const T*>(dout),
                                          static_cast<T*>(dx));
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("NormBackwardDxKernel");
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda::norm_internal

#endif  // LMFORGE_KERNELS_CUDA_NORM_KERNELS_CUH_
