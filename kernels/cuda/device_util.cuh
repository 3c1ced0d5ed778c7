// Device-side helpers shared by the CUDA kernels (included by .cu files only): fp32/bf16 loads and
// stores (bf16 is storage only, all math is fp32), warp and block reductions in a fixed order (results are
// bitwise reproducible run to run), grid sizing, and the stream of a kernels::Context.
#ifndef LMFORGE_KERNELS_CUDA_DEVICE_UTIL_CUH_
#define LMFORGE_KERNELS_CUDA_DEVICE_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/core/context.h"

namespace lmf::kernels::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(bf16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 FromFloat<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

// Logistic sigmoid with the fast exponential (SiLU, SwiGLU, GELU-tanh through sigmoid(2u)).
__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

// GELU, tanh approximation, as x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) (no cancellation of
// 1 + tanh(u) for negative x), and its derivative s + 2 x s (1 - s) u'(x): kernels/cpu/vec.h's formulas.
__device__ __forceinline__ float GeluSigmoid(float x) {
  return Sigmoid(2.0f * 0.7978845608028654f * (x + 0.044715f * x * x * x));
}
__device__ __forceinline__ float GeluTanh(float x) { return x * GeluSigmoid(x); }
__device__ __forceinline__ float GeluTanhGrad(float x) {
  const float s = GeluSigmoid(x);
  return s + 2.0f * x * s * (1.0f - s) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats of shared memory; the function synchronises before reusing it.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

// W consecutive elements to/from fp32: one scalar access when W = 1, else W * sizeof(T) bytes as 16-byte
// accesses (a multiple of 16 bytes; the pointer must then be 16-byte aligned).
template <typename T, int W>
__device__ __forceinline__ void LoadN(const T* p, float (&v)[W]) {
  if constexpr (W == 1) {
    v[0] = ToFloat(*p);
  } else {
    constexpr int kPer = 16 / sizeof(T);
    static_assert(W % kPer == 0, "vector accesses are whole 16-byte pieces");
#pragma unroll
    for (int q = 0; q < W / kPer; ++q) {
      const uint4 raw = reinterpret_cast<const uint4*>(p)[q];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < kPer; ++i) v[q * kPer + i] = ToFloat(e[i]);
    }
  }
}
template <typename T, int W>
__device__ __forceinline__ void StoreN(T* p, const float (&v)[W]) {
  if constexpr (W == 1) {
    *p = FromFloat<T>(v[0]);
  } else {
    constexpr int kPer = 16 / sizeof(T);
    static_assert(W % kPer == 0, "vector accesses are whole 16-byte pieces");
#pragma unroll
    for (int q = 0; q < W / kPer; ++q) {
      uint4 raw;
      T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int i = 0; i < kPer; ++i) e[i] = FromFloat<T>(v[q * kPer + i]);
      reinterpret_cast<uint4*>(p)[q] = raw;
    }
  }
}

// Whether every pointer is 16-byte aligned (null pointers count as aligned).
inline bool Aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

inline cudaStream_t StreamOf(const Context& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

// Blocks for a grid-stride loop over n items with `threads` per block (capped; the loop covers the rest).
inline unsigned GridFor(int64_t n, int threads, int64_t max_blocks = 65535LL * 4) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

}  // namespace lmf::kernels::cuda

// Grid-stride loop over i in [0, count) for 1-D kernels (any grid size covers every index).
#define LMF_GRID_STRIDE(i, count)                                                            \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

#endif  // LMFORGE_KERNELS_CUDA_DEVICE_UTIL_CUH_
