// CUDA FlashAttention-2 (forward, backward); see attention.h for the design.
//
// mma.sync.m16n8k16 fragment layout (PTX ISA), with g = lane / 4 and c = lane % 4:
//   A (16x16, row-major) regs: {(g, 2c..2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..)}
//   B (16x8, k-major)   regs: {(k 2c..2c+1, n g), (k 2c+8.., n g)}
//   C (16x8, fp32)          : {(g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1)}
// so the C fragments of two adjacent n-tiles are, packed to bf16, the A fragment of the next product.
#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/attention_f32_cuda.h"
#include "kernels/attention/attention_mask.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scratch.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Blocks per SM that __launch_bounds__ leaves registers for (65536 / (blocks * 128) a thread). Forward: 4
// at head size 64 (128 registers, what it needs), 2 at 128. dk/dv: 3 at head size 64 (168; at 128 it spills
// with the next step's loads in flight), 2 at 128 (it needs ~240). dq: 2 at both (at 168, sm_80's code for
// head size 64 spills; sm_90a's needs ~150, 3 blocks).
constexpr int ForwardMinBlocks(int d) { return d == 64 ? 4 : 2; }
constexpr int DkDvMinBlocks(int d) { return d == 64 ? 3 : 2; }
constexpr int kDqMinBlocks = 2;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t PackRows(const bf16* p0, const bf16* p1) {
  return static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(p0)) |
         (static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(p1)) << 16);
}

// Issues the copies (cp.async, 16 bytes each) of rows [row0, row0 + rows) of a (., D) strided bf16 matrix
// into shared memory (row stride D + 8), zero-filling rows at or past `valid`; they land at the caller's
// CpAsyncWait, and other threads see them after a __syncthreads that follows it.
template <int D>
__device__ __forceinline__ void LoadRowsAsync(bf16* s, const bf16* g, int64_t row_stride, int row0, int rows,
                                              int valid) {
  constexpr int kVec = D / 8, kStride = D + 8;
#pragma unroll 1
  for (int i = threadIdx.x; i < rows * kVec; i += kThreads) {
    const int r = i / kVec, c = i - r * kVec;
    const bool in = row0 + r < valid;
    CpAsync16(s + r * kStride + c * 8, in ? g + static_cast<int64_t>(row0 + r) * row_stride + c * 8 : g, in);
  }
}

// A fragment of rows r0..r0+15, columns k0..k0+15 of a shared (., D + 8) tile: one ldmatrix, its matrices
// rows +0..7 and +8..15 at columns +0..7, then the same at columns +8..15 (a[0..3] in the A layout).
template <int D>
__device__ __forceinline__ void LoadA(uint32_t (&a)[4], const bf16* s, int r0, int k0, int lane) {
  LdMatrixX4(a[0], a[1], a[2], a[3],
             s + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * (D + 8) + k0 + (lane >> 4) * 8);
}

// B fragments {b[0], b[1]} and {b[2], b[3]} of the n-tiles n0..n0+7 and n0+8..n0+15, k0..k0+15, of a shared
// (., D + 8) tile stored n-major (row = n, e.g. K for Q K^T): one ldmatrix, its matrices rows +0..7 at
// columns +0..7 and +8..15, then rows +8..15 at the same columns.
template <int D>
__device__ __forceinline__ void LoadB2(uint32_t (&b)[4], const bf16* s, int n0, int k0, int lane) {
  LdMatrixX4(b[0], b[1], b[2], b[3],
             s + (n0 + (lane & 7) + (lane >> 4) * 8) * (D + 8) + k0 + ((lane >> 3) & 1) * 8);
}

// The same two n-tiles of a shared (., D + 8) tile stored k-major (row = k, e.g. V for P V): ldmatrix.trans,
// its matrices rows k0+0..7 and k0+8..15 at columns n0+0..7, then the same at columns n0+8..15.
template <int D>
__device__ __forceinline__ void LoadBTrans2(uint32_t (&b)[4], const bf16* s, int k0, int n0, int lane) {
  LdMatrixX4Trans(b[0], b[1], b[2], b[3],
                  s + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * (D + 8) + n0 + (lane >> 4) * 8);
}

// kLdmatrix: V fragments for P V through ldmatrix.trans (one instruction per two d-tiles) instead of two
// 16-bit shared loads per register; the same products in the same order (bitwise the same output).
// kExtras: whether the sliding window and the logit soft-cap are read; without them (the common case) they
// compile away, which keeps the HS 64 kernel within its 128 registers without spilling.
template <int D, bool kCausal, bool kLdmatrix, bool kExtras>
__global__ void __launch_bounds__(kThreads, ForwardMinBlocks(D))
    FlashForwardKernel(AttentionParams p, float scale_log2) {
  if constexpr (!kExtras) p.window = 0, p.softcap = 0.0f;
  constexpr int kBM = 64, kBN = 64, kStride = D + 8;
  __shared__ __align__(16) bf16 sK[kBN * kStride];
  __shared__ __align__(16) bf16 sV[kBN * kStride];
  const int m0 = blockIdx.x * kBM, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (p.NH / p.NKV);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const bf16* q = static_cast<const bf16*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
  const bf16* k = static_cast<const bf16*>(p.k) + b * p.k_stride_b + kvh * p.k_stride_h;
  const bf16* v = static_cast<const bf16*>(p.v) + b * p.v_stride_b + kvh * p.v_stride_h;

  // Q is staged through sV (free until V of the first tile loads), with K of the first tile behind it.
  LoadRowsAsync<D>(sV, q, p.q_stride_t, m0, kBM, static_cast<int>(p.T));
  CpAsyncCommit();
  const int n_begin = FirstKeyTile(p, m0, kBN);  // tiles before the window of every query here: skipped
  LoadRowsAsync<D>(sK, k, p.k_stride_t, n_begin, kBN, static_cast<int>(p.S));
  CpAsyncCommit();
  CpAsyncWait<1>();  // Q
  __syncthreads();
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) LoadA<D>(qf[ks], sV, warp * 16, ks * 16, lane);

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const int rows[2] = {m0 + warp * 16 + g, m0 + warp * 16 + g + 8};
  const int n_end = kCausal ? min(static_cast<int>(p.S), m0 + kBM) : static_cast<int>(p.S);

  // FlashAttention-2's schedule: V of tile n loads under Q K^T of tile n, K of tile n + 1 under the softmax
  // and P V of tile n; two barriers per tile.
  for (int n0 = n_begin; n0 < n_end; n0 += kBN) {
    CpAsyncWait<0>();  // K of this tile
    __syncthreads();   // ... visible to all; every thread is done with sV (Q, or V of the previous tile)
    LoadRowsAsync<D>(sV, v, p.v_stride_t, n0, kBN, static_cast<int>(p.S));
    CpAsyncCommit();
    float s[kBN / 8][4];
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int j = 0; j < kBN / 8; j += 2) {
        uint32_t kb[4];
        LoadB2<D>(kb, sK, j * 8, ks * 16, lane);
        Mma(s[j], qf[ks], kb[0], kb[1]);
        Mma(s[j + 1], qf[ks], kb[2], kb[3]);
      }
    }
    CpAsyncWait<0>();  // V of this tile
    __syncthreads();   // ... visible to all; every thread is done with sK
    if (n0 + kBN < n_end) {
      LoadRowsAsync<D>(sK, k, p.k_stride_t, n0 + kBN, kBN, static_cast<int>(p.S));
      CpAsyncCommit();
    }
    const bool mask_tile = TileNeedsMask(p, kCausal, m0, kBM, n0, kBN);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float alpha =
          OnlineSoftmaxRow<kBN / 8>([&](int j, int e) -> float& { return s[j][2 * r + e]; }, p, kCausal,
                                    mask_tile, b, h, rows[r], n0, c, scale_log2, row_max[r], row_sum[r]);
#pragma unroll
      for (int i = 0; i < D / 8; ++i) o[i][2 * r] *= alpha, o[i][2 * r + 1] *= alpha;
    }
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint32_t a[4] = {Pack(s[2 * kk][0], s[2 * kk][1]), Pack(s[2 * kk][2], s[2 * kk][3]),
                             Pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      if constexpr (kLdmatrix) {
#pragma unroll
        for (int i = 0; i < D / 8; i += 2) {
          uint32_t vb[4];
          LoadBTrans2<D>(vb, sV, kk * 16, i * 8, lane);
          Mma(o[i], a, vb[0], vb[1]);
          Mma(o[i + 1], a, vb[2], vb[3]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
          const bf16* vr = sV + (kk * 16 + 2 * c) * kStride + i * 8 + g;
          Mma(o[i], a, PackRows(vr, vr + kStride), PackRows(vr + 8 * kStride, vr + 9 * kStride));
        }
      }
    }
  }

  bf16* out = static_cast<bf16*>(p.out) + b * p.out_stride_b + h * p.out_stride_h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (rows[r] >= p.T) continue;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    bf16* orow = out + static_cast<int64_t>(rows[r]) * p.out_stride_t;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      *reinterpret_cast<__nv_bfloat162*>(orow + i * 8 + 2 * c) =
          __floats2bfloat162_rn(o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
    }
    if (c == 0)
      p.lse[(static_cast<int64_t>(b) * p.NH + h) * p.T + rows[r]] =
          l > 0.0f ? (row_max[r] + log2f(l)) * kLn2 : -INFINITY;
  }
}

// dsum[b, h, t] = sum_d dout[b, t, h, d] * out[b, t, h, d]; one warp per row.
template <int D>
__global__ void DotRowsKernel(AttentionBackwardParams bp, float* dsum) {
  const AttentionParams& p = bp.forward;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= p.B * p.NH * p.T) return;
  const int64_t t = row % p.T, h = (row / p.T) % p.NH, b = row / (p.T * p.NH);
  const int64_t off = b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h;
  const bf16* o = static_cast<const bf16*>(p.out) + off;
  const bf16* d = static_cast<const bf16*>(bp.dout) + off;
  float s = 0.0f;
  for (int i = lane; i < D; i += 32) s += ToFloat(o[i]) * ToFloat(d[i]);
  s = WarpSum(s);
  if (lane == 0) dsum[row] = s;
}

// dq for 64 queries per block: recompute S and dP per 32-key step, dq += dS K.
template <int D, bool kCausal>
__global__ void __launch_bounds__(kThreads, kDqMinBlocks)
    FlashBackwardDqKernel(AttentionBackwardParams bp, const float* dsum, float scale_log2, float scale) {
  constexpr int kBM = 64, kBN = 32, kStride = D + 8;
  __shared__ __align__(16) bf16 sK[kBM * kStride];  // 64 rows: also stages Q and dO
  __shared__ __align__(16) bf16 sV[kBM * kStride];
  const AttentionParams& p = bp.forward;
  const int m0 = blockIdx.x * kBM, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (p.NH / p.NKV);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const bf16* q = static_cast<const bf16*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
  const bf16* dout = static_cast<const bf16*>(bp.dout) + b * p.out_stride_b + h * p.out_stride_h;
  const bf16* k = static_cast<const bf16*>(p.k) + b * p.k_stride_b + kvh * p.k_stride_h;
  const bf16* v = static_cast<const bf16*>(p.v) + b * p.v_stride_b + kvh * p.v_stride_h;

  LoadRowsAsync<D>(sK, q, p.q_stride_t, m0, kBM, static_cast<int>(p.T));
  LoadRowsAsync<D>(sV, dout, p.out_stride_t, m0, kBM, static_cast<int>(p.T));
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  uint32_t qf[D / 16][4], df[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    LoadA<D>(qf[ks], sK, warp * 16, ks * 16, lane);
    LoadA<D>(df[ks], sV, warp * 16, ks * 16, lane);
  }
  __syncthreads();
  const int rows[2] = {m0 + warp * 16 + g, m0 + warp * 16 + g + 8};
  float lse2[2], ds_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t idx = (static_cast<int64_t>(b) * p.NH + h) * p.T + rows[r];
    lse2[r] = rows[r] < p.T ? p.lse[idx] * kLog2e : -INFINITY;
    ds_row[r] = rows[r] < p.T ? dsum[idx] : 0.0f;
  }
  float dq[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
  const int n_end = kCausal ? min(static_cast<int>(p.S), m0 + kBM) : static_cast<int>(p.S);
  // The 32-key tiles of K and V alternate between the two halves of sK and sV: the next one loads under this
  // one's products.
  const int n_begin = FirstKeyTile(p, m0, kBN);  // tiles before the window of every query here: skipped
  LoadRowsAsync<D>(sK, k, p.k_stride_t, n_begin, kBN, static_cast<int>(p.S));
  LoadRowsAsync<D>(sV, v, p.v_stride_t, n_begin, kBN, static_cast<int>(p.S));
  CpAsyncCommit();
  for (int n0 = n_begin, half = 0; n0 < n_end; n0 += kBN, half ^= 1) {
    const bf16* tK = sK + half * kBN * kStride;
    const bf16* tV = sV + half * kBN * kStride;
    if (n0 + kBN < n_end) {
      LoadRowsAsync<D>(sK + (half ^ 1) * kBN * kStride, k, p.k_stride_t, n0 + kBN, kBN,
                       static_cast<int>(p.S));
      LoadRowsAsync<D>(sV + (half ^ 1) * kBN * kStride, v, p.v_stride_t, n0 + kBN, kBN,
                       static_cast<int>(p.S));
      CpAsyncCommit();
      CpAsyncWait<1>();  // this tile
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    float s[kBN / 8][4], dp[kBN / 8][4];
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = dp[j][0] = dp[j][1] = dp[j][2] = dp[j][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int j = 0; j < kBN / 8; j += 2) {
        uint32_t kb[4], vb[4];
        LoadB2<D>(kb, tK, j * 8, ks * 16, lane);
        LoadB2<D>(vb, tV, j * 8, ks * 16, lane);
        Mma(s[j], qf[ks], kb[0], kb[1]);
        Mma(dp[j], df[ks], vb[0], vb[1]);
        Mma(s[j + 1], qf[ks], kb[2], kb[3]);
        Mma(dp[j + 1], df[ks], vb[2], vb[3]);
      }
    }
    if (TileNeedsMask(p, kCausal, m0, kBM, n0, kBN)) {  // hidden scores -> -inf (a score is never -inf)
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (Masked(p, kCausal, b, h, rows[e >> 1], n0 + j * 8 + 2 * c + (e & 1))) s[j][e] = -INFINITY;
    }
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const bool hidden = lse2[r] == -INFINITY || s[j][e] == -INFINITY;
        const float pr = hidden ? 0.0f : exp2f(ScoreLog2(p, s[j][e], scale_log2) - lse2[r]);
        s[j][e] = hidden ? 0.0f : pr * (dp[j][e] - ds_row[r]) * SoftCapGrad(p, s[j][e] * p.scale);  // dS
      }
    }
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint32_t a[4] = {Pack(s[2 * kk][0], s[2 * kk][1]), Pack(s[2 * kk][2], s[2 * kk][3]),
                             Pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int i = 0; i < D / 8; i += 2) {
        uint32_t kb[4];
        LoadBTrans2<D>(kb, tK, kk * 16, i * 8, lane);
        Mma(dq[i], a, kb[0], kb[1]);
        Mma(dq[i + 1], a, kb[2], kb[3]);
      }
    }
    __syncthreads();  // every thread is done with this half before the tile after next loads into it
  }
  bf16* dqp = static_cast<bf16*>(bp.dq) + b * p.q_stride_b + h * p.q_stride_h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= p.T) continue;
    bf16* row = dqp + static_cast<int64_t>(rows[r]) * p.q_stride_t;
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      *reinterpret_cast<__nv_bfloat162*>(row + i * 8 + 2 * c) =
          __floats2bfloat162_rn(dq[i][2 * r] * scale, dq[i][2 * r + 1] * scale);
  }
}

// dk, dv for 64 keys of one kv head per block, summed over the query heads of its group and all query blocks
// (32 queries per step). Shared memory (dynamic): K, V (64 rows), then two buffers of the steps' Q, dO (32
// rows each), lse2 and dsum (32 each): the next step's load runs under this one's products.
template <int D, bool kCausal>
__global__ void __launch_bounds__(kThreads, DkDvMinBlocks(D))
    FlashBackwardDkDvKernel(AttentionBackwardParams bp, const float* dsum, float scale_log2, float scale) {
  constexpr int kBN = 64, kBM = 32, kStride = D + 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + kBN * kStride;
  bf16* sQ2 = sV + kBN * kStride;                                  // [2][kBM * kStride]
  bf16* sO2 = sQ2 + 2 * kBM * kStride;                             // [2][kBM * kStride]
  float* sL2 = reinterpret_cast<float*>(sO2 + 2 * kBM * kStride);  // [2][kBM]
  float* sD2 = sL2 + 2 * kBM;                                      // [2][kBM]
  const AttentionParams& p = bp.forward;
  const int n0 = blockIdx.x * kBN, kvh = blockIdx.y, b = blockIdx.z;
  const int group = static_cast<int>(p.NH / p.NKV), h_end = (kvh + 1) * group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  // Issues Q and dO of step (query head step_h, queries from step_m0) into buffer `buf` as one cp.async group
  // and stores its lse2 and dsum.
  auto load_step = [&](int step_h, int step_m0, int buf) {
    LoadRowsAsync<D>(sQ2 + buf * kBM * kStride,
                     static_cast<const bf16*>(p.q) + b * p.q_stride_b + step_h * p.q_stride_h, p.q_stride_t,
                     step_m0, kBM, static_cast<int>(p.T));
    LoadRowsAsync<D>(sO2 + buf * kBM * kStride,
                     static_cast<const bf16*>(bp.dout) + b * p.out_stride_b + step_h * p.out_stride_h,
                     p.out_stride_t, step_m0, kBM, static_cast<int>(p.T));
    CpAsyncCommit();
    const int64_t stat = (static_cast<int64_t>(b) * p.NH + step_h) * p.T;
    for (int i = threadIdx.x; i < kBM; i += kThreads) {
      const bool in = step_m0 + i < p.T;
      sL2[buf * kBM + i] = in ? p.lse[stat + step_m0 + i] * kLog2e : -INFINITY;
      sD2[buf * kBM + i] = in ? dsum[stat + step_m0 + i] : 0.0f;
    }
  };
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.0f;
    dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
  }
  const int keys[2] = {n0 + warp * 16 + g, n0 + warp * 16 + g + 8};
  const int m_begin = kCausal ? (n0 / kBM) * kBM : 0;
  const int m_end = QueryEnd(p, n0, kBN);  // queries from here on see none of these keys (a window)
  if (m_begin < m_end) {  // K and V in the first step's group
    LoadRowsAsync<D>(sK, static_cast<const bf16*>(p.k) + b * p.k_stride_b + kvh * p.k_stride_h, p.k_stride_t,
                     n0, kBN, static_cast<int>(p.S));
    LoadRowsAsync<D>(sV, static_cast<const bf16*>(p.v) + b * p.v_stride_b + kvh * p.v_stride_h, p.v_stride_t,
                     n0, kBN, static_cast<int>(p.S));
    load_step(kvh * group, m_begin, 0);
  }
  int buf = 0;
  for (int h = kvh * group; h < h_end; ++h) {
    for (int m0 = m_begin; m0 < m_end; m0 += kBM, buf ^= 1) {
      const bool head_done = m0 + kBM >= m_end;
      if (!head_done || h + 1 < h_end) {
        load_step(head_done ? h + 1 : h, head_done ? m_begin : m0 + kBM, buf ^ 1);
        CpAsyncWait<1>();  // this step
      } else {
        CpAsyncWait<0>();
      }
      __syncthreads();
      const bf16* sQ = sQ2 + buf * kBM * kStride;
      const bf16* sO = sO2 + buf * kBM * kStride;
      const float* sL = sL2 + buf * kBM;
      const float* sD = sD2 + buf * kBM;
      float st[kBM / 8][4], dpt[kBM / 8][4];  // S^T and dP^T: 16 keys x 32 queries per warp
#pragma unroll
      for (int j = 0; j < kBM / 8; ++j)
        st[j][0] = st[j][1] = st[j][2] = st[j][3] = dpt[j][0] = dpt[j][1] = dpt[j][2] = dpt[j][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t kf[4], vf[4];
        LoadA<D>(kf, sK, warp * 16, ks * 16, lane);
        LoadA<D>(vf, sV, warp * 16, ks * 16, lane);
#pragma unroll
        for (int j = 0; j < kBM / 8; j += 2) {
          uint32_t qb[4], ob[4];
          LoadB2<D>(qb, sQ, j * 8, ks * 16, lane);
          LoadB2<D>(ob, sO, j * 8, ks * 16, lane);
          Mma(st[j], kf, qb[0], qb[1]);
          Mma(dpt[j], vf, ob[0], ob[1]);
          Mma(st[j + 1], kf, qb[2], qb[3]);
          Mma(dpt[j + 1], vf, ob[2], ob[3]);
        }
      }
      if (TileNeedsMask(p, kCausal, m0, kBM, n0, kBN)) {  // hidden scores -> -inf (a score is never -inf)
#pragma unroll
        for (int j = 0; j < kBM / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (Masked(p, kCausal, b, h, m0 + j * 8 + 2 * c + (e & 1), keys[e >> 1])) st[j][e] = -INFINITY;
      }
#pragma unroll
      for (int j = 0; j < kBM / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = j * 8 + 2 * c + (e & 1);
          const bool hidden = sL[qi] == -INFINITY || st[j][e] == -INFINITY;
          const float pr = hidden ? 0.0f : exp2f(ScoreLog2(p, st[j][e], scale_log2) - sL[qi]);
          dpt[j][e] = hidden ? 0.0f : pr * (dpt[j][e] - sD[qi]) * SoftCapGrad(p, st[j][e] * p.scale);  // dS^T
          st[j][e] = pr;                                                                      // P^T
        }
      }
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk) {
        const uint32_t pa[4] = {Pack(st[2 * kk][0], st[2 * kk][1]), Pack(st[2 * kk][2], st[2 * kk][3]),
                                Pack(st[2 * kk + 1][0], st[2 * kk + 1][1]),
                                Pack(st[2 * kk + 1][2], st[2 * kk + 1][3])};
        const uint32_t da[4] = {Pack(dpt[2 * kk][0], dpt[2 * kk][1]), Pack(dpt[2 * kk][2], dpt[2 * kk][3]),
                                Pack(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                                Pack(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
        for (int i = 0; i < D / 8; i += 2) {
          uint32_t ob[4], qb[4];
          LoadBTrans2<D>(ob, sO, kk * 16, i * 8, lane);
          LoadBTrans2<D>(qb, sQ, kk * 16, i * 8, lane);
          Mma(dv[i], pa, ob[0], ob[1]);
          Mma(dk[i], da, qb[0], qb[1]);
          Mma(dv[i + 1], pa, ob[2], ob[3]);
          Mma(dk[i + 1], da, qb[2], qb[3]);
        }
      }
      __syncthreads();  // every thread is done with this buffer before the step after next loads into it
    }
  }
  bf16* dkp = static_cast<bf16*>(bp.dk) + b * p.k_stride_b + kvh * p.k_stride_h;
  bf16* dvp = static_cast<bf16*>(bp.dv) + b * p.v_stride_b + kvh * p.v_stride_h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= p.S) continue;
    bf16* kr = dkp + static_cast<int64_t>(keys[r]) * p.k_stride_t;
    bf16* vr = dvp + static_cast<int64_t>(keys[r]) * p.v_stride_t;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      *reinterpret_cast<__nv_bfloat162*>(kr + i * 8 + 2 * c) =
          __floats2bfloat162_rn(dk[i][2 * r] * scale, dk[i][2 * r + 1] * scale);
      *reinterpret_cast<__nv_bfloat162*>(vr + i * 8 + 2 * c) =
          __floats2bfloat162_rn(dv[i][2 * r], dv[i][2 * r + 1]);
    }
  }
}

bool Aligned(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }
bool Aligned8(int64_t stride) { return stride % 8 == 0; }

absl::Status Validate(const AttentionParams& p) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF32)
    return absl::UnimplementedError(
        absl::StrCat("attention: CUDA runs bf16 and f32, not ", DTypeName(p.dtype)));
  if (p.dtype == DType::kBF16 && p.HS != 64 && p.HS != 128)
    return absl::UnimplementedError(
        absl::StrCat("attention: CUDA bf16 head size ", p.HS, " (64 or 128 supported)"));
  if (p.dtype == DType::kF32 && !internal::F32AttentionSupportsHeadSize(p.HS))
    return absl::UnimplementedError(
        absl::StrCat("attention: CUDA f32 head size ", p.HS, " (32, 64 or 128 supported)"));
  if (p.NKV <= 0 || p.NH % p.NKV != 0)
    return absl::InvalidArgumentError(absl::StrCat("attention: NKV ", p.NKV, " does not divide NH ", p.NH));
  if (p.lse == nullptr) return absl::InvalidArgumentError("attention: lse is required");
  if (p.T >= (int64_t{1} << 31) || p.S >= (int64_t{1} << 31))
    return absl::InvalidArgumentError("attention: T or S >= 2^31");
  if (p.B < 0 || p.T < 0 || p.S < 0 || p.NH < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("attention: negative size B=", p.B, " T=", p.T, " S=", p.S, " NH=", p.NH));
  // No keys: the backward's dk/dv grid would have 0 blocks (a launch error); the CPU kernel rejects it too.
  if (p.T > 0 && p.S == 0) return absl::InvalidArgumentError("attention: S = 0 keys for T > 0 queries");
  if (p.window < 0) return absl::InvalidArgumentError(absl::StrCat("attention: window ", p.window, " < 0"));
  if (!(p.softcap >= 0.0f) || !std::isfinite(p.softcap))
    return absl::InvalidArgumentError(absl::StrCat("attention: softcap ", p.softcap, " must be finite and >= 0"));
  // Every grid is (row blocks, heads, batch): CUDA limits gridDim.y and gridDim.z to 65535.
  if (p.NH > 65535 || p.B > 65535)
    return absl::InvalidArgumentError(absl::StrCat(
        "attention: CUDA runs NH and B up to 65535 (grid y/z limit), got NH=", p.NH, " B=", p.B));
  if (p.dtype == DType::kF32) return absl::OkStatus();  // scalar loads: any strides
  for (int64_t s :
       {p.q_stride_b, p.q_stride_t, p.q_stride_h, p.k_stride_b, p.k_stride_t, p.k_stride_h, p.v_stride_b,
        p.v_stride_t, p.v_stride_h, p.out_stride_b, p.out_stride_t, p.out_stride_h}) {
    if (!Aligned8(s))
      return absl::InvalidArgumentError(absl::StrCat("attention: stride ", s, " is not a multiple of 8"));
  }
  if (!Aligned(p.q) || !Aligned(p.k) || !Aligned(p.v) || !Aligned(p.out))
    return absl::InvalidArgumentError("attention: q, k, v and out must be 16-byte aligned");
  return absl::OkStatus();
}

template <int D, bool kCausal>
absl::Status LaunchForward(const Context& ctx, const AttentionParams& p, AttentionForwardVariant variant) {
  const dim3 grid(static_cast<unsigned>((p.T + 63) / 64), static_cast<unsigned>(p.NH),
                  static_cast<unsigned>(p.B));
  const bool ldmatrix = variant == AttentionForwardVariant::kLdmatrixV, extras = p.window > 0 || p.softcap > 0;
  auto* kernel = ldmatrix ? (extras ? FlashForwardKernel<D, kCausal, true, true>
                                    : FlashForwardKernel<D, kCausal, true, false>)
                          : (extras ? FlashForwardKernel<D, kCausal, false, true>
                                    : FlashForwardKernel<D, kCausal, false, false>);
  kernel<<<grid, kThreads, 0, StreamOf(ctx)>>>(p, p.scale * kLog2e);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("FlashForwardKernel");
  return absl::OkStatus();
}

}  // namespace

namespace internal {
// attention_wgmma_cuda.cu: whether ctx's device runs sm_90a code (Unimplemented naming `what` otherwise), and
// the wgmma dk/dv and dq kernels (after dsum is computed).
absl::Status RequireSm90a(const Context& ctx, const char* what);
absl::Status AttentionForwardWgmma(const Context& ctx, const AttentionParams& p);
absl::Status AttentionBackwardDkDvWgmma(const Context& ctx, const AttentionBackwardParams& bp,
                                        const float* dsum);
absl::Status AttentionBackwardDqWgmma(const Context& ctx, const AttentionBackwardParams& bp,
                                      const float* dsum);
}  // namespace internal

namespace {

template <int D, bool kCausal>
absl::Status LaunchBackward(const Context& ctx, const AttentionBackwardParams& bp, float* dsum,
                            AttentionBackwardVariant variant) {
  const AttentionParams& p = bp.forward;
  const cudaStream_t stream = StreamOf(ctx);
  const int64_t rows = p.B * p.NH * p.T;
  DotRowsKernel<D><<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(bp, dsum);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("DotRowsKernel");
  if (variant == AttentionBackwardVariant::kWgmma) {
    LMF_RETURN_IF_ERROR_STATUS(internal::AttentionBackwardDqWgmma(ctx, bp, dsum));
    return internal::AttentionBackwardDkDvWgmma(ctx, bp, dsum);
  }
  const dim3 qgrid(static_cast<unsigned>((p.T + 63) / 64), static_cast<unsigned>(p.NH),
                   static_cast<unsigned>(p.B));
  FlashBackwardDqKernel<D, kCausal><<<qgrid, kThreads, 0, stream>>>(bp, dsum, p.scale * kLog2e, p.scale);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("FlashBackwardDqKernel");
  if (variant == AttentionBackwardVariant::kWgmmaDkDv)
    return internal::AttentionBackwardDkDvWgmma(ctx, bp, dsum);
  const size_t smem = static_cast<size_t>(2 * 64 + 4 * 32) * (D + 8) * sizeof(bf16) + 4 * 32 * sizeof(float);
  LMF_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(FlashBackwardDkDvKernel<D, kCausal>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(smem)));
  const dim3 kgrid(static_cast<unsigned>((p.S + 63) / 64), static_cast<unsigned>(p.NKV),
                   static_cast<unsigned>(p.B));
  FlashBackwardDkDvKernel<D, kCausal><<<kgrid, kThreads, smem, stream>>>(bp, dsum, p.scale * kLog2e, p.scale);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("FlashBackwardDkDvKernel");
  return absl::OkStatus();
}

}  // namespace

absl::Status AttentionForwardWithVariant(const Context& ctx, const AttentionParams& p,
                                         AttentionForwardVariant v) {
  LMF_RETURN_IF_ERROR_STATUS(Validate(p));
  if (v == AttentionForwardVariant::kWgmma && p.dtype != DType::kBF16)
    return absl::UnimplementedError(
        absl::StrCat("attention: the wgmma forward runs bf16, not ", DTypeName(p.dtype)));
  if (p.B * p.NH * p.T == 0) return absl::OkStatus();
  if (p.dtype == DType::kF32) return internal::AttentionForwardF32(ctx, p);
  if (v == AttentionForwardVariant::kWgmma) return internal::AttentionForwardWgmma(ctx, p);
  if (p.HS == 64) return p.causal ? LaunchForward<64, true>(ctx, p, v) : LaunchForward<64, false>(ctx, p, v);
  return p.causal ? LaunchForward<128, true>(ctx, p, v) : LaunchForward<128, false>(ctx, p, v);
}

absl::Status AttentionForward(const Context& ctx, const AttentionParams& p) {
  return AttentionForwardWithVariant(ctx, p, AttentionForwardVariant::kPackedV);
}

absl::Status AttentionBackwardWithVariant(const Context& ctx, const AttentionBackwardParams& bp,
                                          AttentionBackwardVariant v) {
  const AttentionParams& p = bp.forward;
  LMF_RETURN_IF_ERROR_STATUS(Validate(p));
  if (v == AttentionBackwardVariant::kWgmmaDkDv || v == AttentionBackwardVariant::kWgmma) {
    const char* what =
        v == AttentionBackwardVariant::kWgmma ? "the wgmma backward" : "the wgmma dk/dv backward";
    if (p.dtype != DType::kBF16)
      return absl::UnimplementedError(
          absl::StrCat("attention: ", what, " runs bf16, not ", DTypeName(p.dtype)));
    LMF_RETURN_IF_ERROR_STATUS(internal::RequireSm90a(ctx, what));
  }
  if (p.dtype == DType::kBF16 && (!Aligned(bp.dout) || !Aligned(bp.dq) || !Aligned(bp.dk) || !Aligned(bp.dv)))
    return absl::InvalidArgumentError("attention backward: dout, dq, dk and dv must be 16-byte aligned");
  if (p.B * p.NH * p.T == 0) return absl::OkStatus();
  Scratch dsum;
  LMF_RETURN_IF_ERROR_STATUS(dsum.Allocate(ctx, sizeof(float) * p.B * p.NH * p.T));
  if (p.dtype == DType::kF32) return internal::AttentionBackwardF32(ctx, bp, dsum.get<float>());
  if (p.HS == 64) {
    return p.causal ? LaunchBackward<64, true>(ctx, bp, dsum.get<float>(), v)
                    : LaunchBackward<64, false>(ctx, bp, dsum.get<float>(), v);
  }
  return p.causal ? LaunchBackward<128, true>(ctx, bp, dsum.get<float>(), v)
                  : LaunchBackward<128, false>(ctx, bp, dsum.get<float>(), v);
}

absl::Status AttentionBackward(const Context& ctx, const AttentionBackwardParams& bp) {
  return AttentionBackwardWithVariant(ctx, bp, AttentionBackwardVariant::kMmaSync);
}

}  // namespace lmf::kernels::cuda
