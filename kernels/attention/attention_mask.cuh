// Which scores the bf16 attention forward kernels hide (attention_cuda.cu's FlashAttention-2 kernels and
// attention_wgmma_cuda.cu's Hopper forward): the causal, T/S and mask-tensor rules of attention.h, per score
// and per tile, shared so that every variant masks alike.
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
  if (p.mask != nullptr &&
      p.mask[b * p.mask_stride_b + h * p.mask_stride_h + static_cast<int64_t>(t) * p.mask_stride_t + u] == 0)
    return true;
  return false;
}

// Whether any key of [u0, u0 + keys) can be hidden from any query of [t0, t0 + queries): the tile crosses T
// or S, the causal diagonal, or a mask tensor is given. Only such tiles call Masked() per element (as
// FlashAttention-2 does); the others skip it, which changes no arithmetic.
__device__ __forceinline__ bool TileNeedsMask(const AttentionParams& p, bool causal, int t0, int queries,
                                              int u0, int keys) {
  return p.mask != nullptr || t0 + queries > p.T || u0 + keys > p.S || (causal && u0 + keys - 1 > t0);
}

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_ATTENTION_ATTENTION_MASK_CUH_
