// Which scores the CUDA attention kernels hide and how they soft-cap them (attention_cuda.cu's
// FlashAttention-2 kernels, attention_wgmma_cuda.cu's Hopper kernels, attention_f32_cuda.cu's fp32 kernels):
// the causal, sliding-window, T/S and mask-tensor rules of attention.h per score and per tile, the logit
// soft-cap and its derivative, and the online-softmax step that applies them, shared so that every variant
// masks, caps and normalises alike.
#ifndef LMFORGE_KERNELS_ATTENTION_ATTENTION_MASK_CUH_
#define LMFORGE_KERNELS_ATTENTION_ATTENTION_MASK_CUH_

#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/cuda/device_util.cuh"

namespace lmf::kernels::cuda {

// Whether key u is hidden from query t.
__device__ __forceinline__ bool Masked(const AttentionParams& p, bool causal, int b, int h, int t, int u) {
  if (t >= p.T || u >= p.S) return true;
  if (causal && u > t) return true;
  if (p.window > 0 && u <= t - p.window) return true;
  if (p.mask != nullptr &&
      p.mask[b * p.mask_stride_b + h * p.mask_stride_h + static_cast<int64_t>(t) * p.mask_stride_t + u] == 0)
    return true;
  return false;
}

// Whether any key of [u0, u0 + keys) can be hidden from any query of [t0, t0 + queries): the tile crosses T
// or S, the causal diagonal or the window's lower edge (its first key is at or before its last query minus
// the window), or a mask tensor is given. Only such tiles call Masked() per element (as
// FlashAttention-2 does); the others skip it, which changes no arithmetic.
__device__ __forceinline__ bool TileNeedsMask(const AttentionParams& p, bool causal, int t0, int queries,
                                              int u0, int keys) {
  return p.mask != nullptr || t0 + queries > p.T || u0 + keys > p.S || (causal && u0 + keys - 1 > t0) ||
         (p.window > 0 && u0 <= t0 + queries - 1 - p.window);
}

// The first key of the tile (of `tile` keys) holding the first key query t0 may see: keys before it are
// outside the window of every query from t0 on, so a loop over key tiles may start there (0 without a
// window).
__device__ __forceinline__ int FirstKeyTile(const AttentionParams& p, int t0, int tile) {
  if (p.window <= 0) return 0;
  const int64_t first = t0 - p.window + 1;
  return first <= 0 ? 0 : static_cast<int>(first / tile * tile);
}

// One past the last query that may see a key of [u0, u0 + keys): later queries' windows have moved past it
// (p.T without a window).
__device__ __forceinline__ int QueryEnd(const AttentionParams& p, int u0, int keys) {
  if (p.window <= 0) return static_cast<int>(p.T);
  const int64_t end = static_cast<int64_t>(u0) + keys - 1 + p.window;
  return static_cast<int>(end < p.T ? end : p.T);
}

// A scaled score x (scale * q.k) after the logit soft-cap, softcap * tanh(x / softcap) (x without one), and
// the cap's derivative at x, 1 - tanh(x / softcap)^2 (1 without one): dS carries it.
__device__ __forceinline__ float SoftCap(const AttentionParams& p, float x) {
  return p.softcap > 0.0f ? p.softcap * tanhf(x / p.softcap) : x;
}
__device__ __forceinline__ float SoftCapGrad(const AttentionParams& p, float x) {
  if (p.softcap <= 0.0f) return 1.0f;
  const float t = tanhf(x / p.softcap);
  return 1.0f - t * t;
}

// The cap's derivative recovered from a probability P = exp2(x2 - lse2) of a capped score x2 (log2 units),
// for kernels that keep P but not the score until dS: x2 = log2(P) + lse2, t = x2 ln 2 / softcap (the tanh),
// 1 - t^2. 1 without a cap; 0 where P is 0 (hidden, or exp2 underflowed: dS is 0 there either way, and
// log2(0) would make it NaN).
__device__ __forceinline__ float SoftCapGradFromP(const AttentionParams& p, float prob, float lse2) {
  if (p.softcap <= 0.0f) return 1.0f;
  if (prob == 0.0f) return 0.0f;
  const float t = (__log2f(prob) + lse2) * (0.6931471805599453f / p.softcap);
  return 1.0f - t * t;
}

// A raw score s = q.k in log2 units for the softmax: scale * s * log2(e) (scale_log2 = scale * log2(e)), or
// the soft-capped SoftCap(scale * s) * log2(e).
__device__ __forceinline__ float ScoreLog2(const AttentionParams& p, float s, float scale_log2) {
  if (p.softcap > 0.0f) return SoftCap(p, s * p.scale) * 1.4426950408889634f;
  return s * scale_log2;
}

// One online-softmax step (FlashAttention-2) for query `row` over a tile of keys u0.. held as mma.m16n8 /
// wgmma accumulator fragments: score(j, e) is this thread's score of key u0 + 8j + 2c + e (j < kKeyBlocks,
// e < 2, c = lane % 4). Scales each to log2 units (soft-capping it where p.softcap > 0), hides masked keys
// (-inf; checked only where mask_tile), takes the row maximum over the row's 4 threads, replaces each score
// by exp2(score - max) and updates the running max and this thread's partial sum (the row's 4 threads are
// summed at the end). Returns alpha, the factor the row's output accumulators are to be scaled by.
template <int kKeyBlocks, typename Score>
__device__ __forceinline__ float OnlineSoftmaxRow(Score&& score, const AttentionParams& p, bool causal,
                                                  bool mask_tile, int b, int h, int row, int u0, int c,
                                                  float scale_log2, float& row_max, float& row_sum) {
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < kKeyBlocks; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float x = ScoreLog2(p, score(j, e), scale_log2);
      if (mask_tile && Masked(p, causal, b, h, row, u0 + j * 8 + 2 * c + e)) x = -INFINITY;
      score(j, e) = x;
      mx = fmaxf(mx, x);
    }
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float new_max = fmaxf(row_max, mx);
  const float use = new_max == -INFINITY ? 0.0f : new_max;
  const float alpha = exp2f(row_max - use);
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kKeyBlocks; ++j) {
    score(j, 0) = exp2f(score(j, 0) - use);
    score(j, 1) = exp2f(score(j, 1) - use);
    sum += score(j, 0) + score(j, 1);
  }
  row_sum = row_sum * alpha + sum;
  row_max = new_max;
  return alpha;
}

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_ATTENTION_ATTENTION_MASK_CUH_
