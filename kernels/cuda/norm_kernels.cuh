// The RMSNorm and LayerNorm CUDA kernels, shared by kernels/rmsnorm/rmsnorm_cuda.cu and
// kernels/layernorm/layernorm_cuda.cu (device code: include from .cu files only). One template per pass,
// kLayer selecting LayerNorm (mean and bias) or RMSNorm, kResidual the fused residual-add forward.
// Forward: one warp per row (4 rows per 128-thread block), 16-byte accesses where the row length and
// alignment allow: statistics in fp32 with a fixed-order warp reduction, LayerNorm variance in two passes
// (mean first), as the CPU kernels; the second and third passes re-read the row from L1/L2.
// Backward: one kernel reads x and dout once from memory (the second pass over a row again from L1/L2) and
// writes dx (=) and per-block sums of the parameter gradients into scratch, then a fixed-order sum over the
// blocks adds them to dweight and dbias (+=). No atomics: bitwise reproducible.
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

// The backward, one pass over memory. Block b takes the rows [b R, min(N, b R + R)) (R = rows_per_block, a
// multiple of kBackwardWarps) in row groups of kBackwardWarps rows, one row per warp. A warp computes its
// row's dx exactly as the two-kernel backward did (same loads, same float operations, same warp sums: dx is
// bitwise the same), and in its second pass over the row also the terms of the parameter gradients from
// the values it has loaded: dout * xhat (dweight) and dout (dbias, kAcc = 2). Per column step (32 W columns)
// every warp writes its terms to its own slice of `step` (shared memory), the block synchronises, and the
// block adds the live warps' terms in warp order (0, 1, ...) to its running sums `acc` (shared memory, or
// the block's own rows of `partial` where kAcc C floats do not fit), which it writes to partial[q][b][c]
// at the end; AccumulateChunksKernel then adds the blocks in order. `step` is double-buffered, so one
// __syncthreads per column step suffices: a warp writes a buffer again only after the next step's barrier,
// which every thread reaches after its reads of that buffer. No atomics: bitwise reproducible.
// dx may alias dout: every element of dout is read only by the lane that writes dx over it (lane l owns
// columns [l W, l W + W) of every step), in pass 1 before the warp sum that every lane of the warp passes
// before any lane's pass 2, and in pass 2 into registers before the lane's own store of that element.
// Shapes: x, dout, dx (N, C); w (C); mean, rstd (N); partial (kAcc, gridDim.x, C), every element written.
inline constexpr int kBackwardWarps = 8;
inline constexpr int kBackwardThreads = 32 * kBackwardWarps;
// At most this many blocks (~4 per SM of an H100's 132: ~31 resident warps per SM) and partial rows: the
// partials stay small (kAcc x 512 x C floats) and AccumulateChunksKernel's serial sum short.
inline constexpr int64_t kMaxBackwardBlocks = 512;
// Shared memory for acc and step above which acc moves to the block's rows of `partial` (C > ~16K).
inline constexpr size_t kMaxBackwardShared = 160 * 1024;

template <typename T, bool kLayer, int W, int kAcc>
__global__ void __launch_bounds__(kBackwardThreads)
    NormBackwardKernel(int64_t N, int C, int64_t rows_per_block, bool acc_in_shared, const T* x, const T* w,
                       const float* mean, const float* rstd, const T* dout, T* dx, float* partial) {
  constexpr int kSpan = 32 * W;  // columns per step of a warp
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int64_t r1 = min(N, r0 + rows_per_block);
  const int64_t part_stride = static_cast<int64_t>(gridDim.x) * C;  // partial: (kAcc, blocks, C)
  [[maybe_unused]] float* acc = nullptr;                            // acc[q * acc_stride + c], q 0: dw, 1: db
  [[maybe_unused]] int64_t acc_stride = 0;
  [[maybe_unused]] float* step = nullptr;  // step[((buf * kBackwardWarps + warp) * kAcc + q) * kSpan + o]
  if constexpr (kAcc > 0) {
    acc = acc_in_shared ? smem : partial + static_cast<int64_t>(blockIdx.x) * C;
    acc_stride = acc_in_shared ? C : part_stride;
    step = acc_in_shared ? smem + kAcc * C : smem;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
      for (int q = 0; q < kAcc; ++q) acc[q * acc_stride + c] = 0.0f;  // first read after a step's barrier
  }
  int buf = 0;
  for (int64_t g = r0; g < r1; g += kBackwardWarps) {
    const int64_t row = g + warp;
    const bool live = row < r1;  // the last group of the last block may be partial
    const int64_t base = row * C;
    float r = 0.0f, mu = 0.0f, mean_g = 0.0f, mean_gx = 0.0f;
    if (live) {
      r = rstd[row];
      mu = kLayer ? mean[row] : 0.0f;
      float sum_g = 0.0f, sum_gx = 0.0f;  // sum g, sum g * xhat (LayerNorm); sum g * x (RMSNorm)
      for (int c = lane * W; c < C; c += kSpan) {
        float d[W], wv[W], xv[W];
        LoadN<T, W>(dout + base + c, d);
        LoadN<T, W>(w + c, wv);
        LoadN<T, W>(x + base + c, xv);
#pragma unroll
        for (int i = 0; i < W; ++i) {
          const float gi = d[i] * wv[i];
          if constexpr (kLayer) {
            sum_g += gi;
            sum_gx += gi * (xv[i] - mu) * r;
          } else {
            sum_gx += gi * xv[i];
          }
        }
      }
      sum_gx = WarpSum(sum_gx);
      if constexpr (kLayer) sum_g = WarpSum(sum_g);
      mean_g = sum_g / C;
      mean_gx = sum_gx / C;
    }
    // Every thread of the block takes every step (the barrier), live or not, in range or not.
    for (int c0 = 0; c0 < C; c0 += kSpan, buf ^= 1) {
      const int c = c0 + lane * W;
      if (live && c < C) {
        float d[W], wv[W], xv[W];
        LoadN<T, W>(dout + base + c, d);
        LoadN<T, W>(w + c, wv);
        LoadN<T, W>(x + base + c, xv);
        if constexpr (kAcc > 0) {
          float* mine = step + (buf * kBackwardWarps + warp) * kAcc * kSpan + lane * W;
#pragma unroll
          for (int i = 0; i < W; ++i) {
            const float xhat = kLayer ? (xv[i] - mu) * r : xv[i] * r;
            mine[i] = d[i] * xhat;
            if constexpr (kAcc > 1) mine[kSpan + i] = d[i];
          }
        }
#pragma unroll
        for (int i = 0; i < W; ++i) {
          const float gi = d[i] * wv[i];
          if constexpr (kLayer) {
            d[i] = r * (gi - mean_g - (xv[i] - mu) * r * mean_gx);
          } else {
            d[i] = r * (gi - xv[i] * (r * r * mean_gx));
          }
        }
        StoreN<T, W>(dx + base + c, d);
      }
      if constexpr (kAcc > 0) {
        __syncthreads();
        const int live_warps = static_cast<int>(min(static_cast<int64_t>(kBackwardWarps), r1 - g));
        for (int v = threadIdx.x; v < kAcc * kSpan; v += blockDim.x) {
          const int q = v / kSpan, o = v - q * kSpan;
          if (c0 + o >= C) continue;
          const float* terms = step + (buf * kBackwardWarps * kAcc + q) * kSpan + o;
          float s = terms[0];
          for (int j = 1; j < live_warps; ++j) s += terms[j * kAcc * kSpan];
          acc[q * acc_stride + c0 + o] += s;
        }
      }
    }
  }
  if constexpr (kAcc > 0) {
    if (acc_in_shared) {
      __syncthreads();
      float* own = partial + static_cast<int64_t>(blockIdx.x) * C;
      for (int c = threadIdx.x; c < C; c += blockDim.x)
        for (int q = 0; q < kAcc; ++q) own[q * part_stride + c] = acc[q * C + c];
    }
  }
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
  const bool want_b = kLayer && dbias != nullptr;
  const int acc = want_b ? 2 : dweight != nullptr ? 1 : 0;  // parameter gradients summed per block
  int64_t rows_per_block = (N + kMaxBackwardBlocks - 1) / kMaxBackwardBlocks;
  rows_per_block = (rows_per_block + kBackwardWarps - 1) / kBackwardWarps * kBackwardWarps;
  const int64_t blocks = (N + rows_per_block - 1) / rows_per_block;
  constexpr int kW = 16 / sizeof(T);
  const bool vec = C % kW == 0 && Aligned16({x, w, dout, dx});
  const size_t step_bytes = sizeof(float) * 2 * kBackwardWarps * acc * 32 * (vec ? kW : 1);
  const size_t acc_bytes = sizeof(float) * acc * C;
  const bool acc_in_shared = step_bytes + acc_bytes <= kMaxBackwardShared;
  const size_t smem = step_bytes + (acc_in_shared ? acc_bytes : 0);
  Scratch scratch;
  float* partial = nullptr;
  if (acc > 0) {
    LMF_RETURN_IF_ERROR_STATUS(scratch.Allocate(ctx, sizeof(float) * acc * blocks * C));
    partial = scratch.get<float>();
  }
  using Kernel = void (*)(int64_t, int, int64_t, bool, const T*, const T*, const float*, const float*,
                          const T*, T*, float*);
  Kernel kernel = nullptr;
  if (acc == 0) kernel = vec ? NormBackwardKernel<T, kLayer, kW, 0> : NormBackwardKernel<T, kLayer, 1, 0>;
  if (acc == 1) kernel = vec ? NormBackwardKernel<T, kLayer, kW, 1> : NormBackwardKernel<T, kLayer, 1, 1>;
  if constexpr (kLayer) {
    if (acc == 2) kernel = vec ? NormBackwardKernel<T, kLayer, kW, 2> : NormBackwardKernel<T, kLayer, 1, 2>;
  }
  if (smem > 48 * 1024) {
    LMF_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  kernel<<<static_cast<unsigned>(blocks), kBackwardThreads, smem, stream>>>(
      N, static_cast<int>(C), rows_per_block, acc_in_shared, static_cast<const T*>(x),
      static_cast<const T*>(w), mean, rstd, static_cast<const T*>(dout), static_cast<T*>(dx), partial);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("NormBackwardKernel");
  const unsigned cblocks = static_cast<unsigned>((C + 255) / 256);
  if (dweight != nullptr) {
    AccumulateChunksKernel<float><<<cblocks, 256, 0, stream>>>(static_cast<int>(C), static_cast<int>(blocks),
                                                               partial, static_cast<float*>(dweight));
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("AccumulateChunksKernel");
  }
  if (want_b) {
    AccumulateChunksKernel<float><<<cblocks, 256, 0, stream>>>(
        static_cast<int>(C), static_cast<int>(blocks), partial + blocks * C, static_cast<float*>(dbias));
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("AccumulateChunksKernel");
  }
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda::norm_internal

#endif  // LMFORGE_KERNELS_CUDA_NORM_KERNELS_CUH_
