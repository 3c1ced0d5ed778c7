// The Hopper (sm_90a) bf16 attention kernels on wgmma (wgmma.cuh) instead of mma.sync: the forward,
// AttentionForwardVariant::kWgmma (attention.h), and below it the backward's dk/dv kernel (of the variants
// AttentionBackwardVariant::kWgmmaDkDv and kWgmma) and dq kernel (of kWgmma; kWgmmaDkDv uses
// attention_cuda.cu's, whose dsum kernel both use). Same contract as attention_cuda.cu's kernels: bf16 q, k,
// v, out with 16-byte aligned rows, fp32 lse, causal and/or a mask tensor, GQA/MQA by kv-head indexing, HS
// 64 or 128, any T and S; out and lse, dq, dk and dv are written (=).
//
// The forward:
//
// Shape (FlashAttention-3's): two consumer warpgroups (256 threads) per block and 128 queries; warpgroup wg
// owns queries 64wg..64wg+63 of the block (the m64 of wgmma: its warp w rows 16w..16w+15), with its own S
// and O accumulators in registers and its own online softmax, and both read the SAME K and V tiles: half
// the shared-memory fills per query of a one-warpgroup block. 64 keys per step. S = Q K^T is m64n64k16 with
// both operands in shared memory, K-major (HS / 16 instructions); P, rounded to bf16 in registers, is the A
// operand of O += P V (m64n64k16 per 64 output columns, A from registers, V MN-major: the transpose bit).
// Tiles are stored in the 128B-swizzled canonical layout (wgmma.cuh): 64-column blocks of 64 rows x 128
// bytes, 16-byte chunk j of row r at chunk j ^ (r % 8), each block 1024-byte aligned; cp.async (all 256
// threads) writes them 16 bytes at a time, and the XOR spreads the 8 rows a quarter-warp writes over all
// banks. Schedule (FlashAttention-3's intra-warpgroup overlap in each warpgroup, without its producer warp
// and TMA): Q K^T of step i + 1 is issued before the softmax of step i and runs under it, then P V of step
// i; one wait retires both. K and V are double-buffered and load a whole step ahead (K of step i + 2 and V of
// step i + 1 are issued at the top of step i), one __syncthreads per step. The block loads the keys any of
// its queries sees (causal: through the upper warpgroup's last query, 64 more than the lower one's); a
// warpgroup computes only the steps its own queries see and passes the others' barriers (and issues its
// share of their loads) without computing; a warpgroup whose queries are all past T (the tail block) computes
// nothing and writes nothing. The online softmax (exp2 with log2(e) folded into the scale, per-thread partial
// row sums) is the mma.sync kernel's, element for element. Registers per thread as in one warpgroup: O (32 /
// 64 f32 at HS 64 / 128) and two S (32 each, one in flight); __launch_bounds__(256, 1) (two blocks of 256
// threads would cap them at 128, where the one-warpgroup kernel spilled); the same 8 warps per SM as two
// one-warpgroup blocks. ptxas (sm_90a) figures in kernels/README.md.
//
// Shared memory (dynamic): two Q tiles (one per warpgroup), two K and two V tiles of 64 x HS bf16, plus 1 KiB
// to align them to 1024 bytes: 49 / 97 KiB at HS 64 / 128 (opt-in above 48 KiB); 4 / 2 blocks per SM by
// shared memory (228 KiB per SM, 1 KiB reserved per block), 1 by registers.
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_mask.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/attention/wgmma.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 128;            // one warpgroup: the backward kernels' block
constexpr int kRows = 64;                // queries per warpgroup, keys per step: every tile is 64 rows
constexpr int kTileBytes = kRows * 128;  // one 64-column block of a tile: 64 rows of 128 bytes
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

constexpr int kForwardThreads = 2 * kThreads;  // the forward's block: two warpgroups
constexpr int kForwardRows = 2 * kRows;        // ... and their queries

constexpr size_t WgmmaSharedBytes(int d) { return 6 * static_cast<size_t>(kRows) * d * 2 + 1024; }

__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Issues the copies (cp.async, 16 bytes each) of rows [row0, row0 + 64) of a (., D) strided bf16 matrix
// into a 128B-swizzled tile (rows past `valid` zero-filled), shared by the block's kLoaders threads: element
// (r, col) at byte (col / 64) * kTileBytes + r * 128 + (((col % 64) / 8) ^ (r % 8)) * 16 + (col % 8) * 2.
template <int D, int kLoaders = kThreads>
__device__ __forceinline__ void LoadTileAsync(bf16* tile, const bf16* g, int64_t row_stride, int row0,
                                              int valid) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
#pragma unroll 1
  for (int i = threadIdx.x; i < kRows * kChunks; i += kLoaders) {
    const int r = i / kChunks, c = i - r * kChunks;
    const bool in = row0 + r < valid;
    bf16* dst = tile + (c >> 3) * (kTileBytes / 2) + r * 64 + (((c & 7) ^ (r & 7)) << 3);
    CpAsync16(dst, in ? g + static_cast<int64_t>(row0 + r) * row_stride + c * 8 : g, in);
  }
}

// Descriptor of k-step ks (columns 16ks..16ks+15) of a K-major tile: block ks / 4, 32 bytes per step inside
// it; 8-row groups 1024 bytes apart (SBO), LBO unused (16).
__device__ __forceinline__ uint64_t KMajorDesc(uint32_t tile, int ks) {
  return WgmmaDescriptor(tile + (ks >> 2) * kTileBytes + (ks & 3) * 32, 16, 1024, WgmmaSwizzle::k128B);
}
// Descriptor of rows 16kk..16kk+15 and columns 64nb..64nb+63 of an MN-major tile (V: rows are the k of
// P V): k rows 0-7 and 8-15 1024 bytes apart (SBO); LBO (next 64 columns) is not reached with N = 64.
__device__ __forceinline__ uint64_t MNMajorDesc(uint32_t tile, int kk, int nb) {
  return WgmmaDescriptor(tile + nb * kTileBytes + kk * 2048, kTileBytes, 1024, WgmmaSwizzle::k128B);
}

template <int D, bool kCausal>
__global__ void __launch_bounds__(kForwardThreads, 1)
    FlashForwardWgmmaKernel(AttentionParams p, float scale_log2) {
  constexpr int kBlocks = D / 64;   // 64-column blocks of a tile
  constexpr int kTile = kRows * D;  // elements of one tile
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw_address = SharedAddress(smem_raw);
  // Q: one tile per warpgroup (warpgroup wg's queries in tile wg); K, V: two buffers each, step i's in i % 2.
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw + ((1024 - raw_address % 1024) % 1024));
  bf16* sK = sQ + 2 * kTile;
  bf16* sV = sK + 2 * kTile;
  const int wg = threadIdx.x >> 7;
  const uint32_t aQ = SharedAddress(sQ + wg * kTile), aK = SharedAddress(sK), aV = SharedAddress(sV);

  const int m0 = blockIdx.x * kForwardRows, h = blockIdx.y, b = blockIdx.z;
  const int q0 = m0 + wg * kRows;  // this warpgroup's first query
  const int kvh = h / (p.NH / p.NKV);
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const bf16* q = static_cast<const bf16*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
  const bf16* k = static_cast<const bf16*>(p.k) + b * p.k_stride_b + kvh * p.k_stride_h;
  const bf16* v = static_cast<const bf16*>(p.v) + b * p.v_stride_b + kvh * p.v_stride_h;
  const int T = static_cast<int>(p.T), S = static_cast<int>(p.S);
  // Key steps of the 64 queries from `first` on: none past T; causal, through their last query.
  auto steps_from = [&](int first) -> int {
    if (first >= T) return 0;
    const int n_end = kCausal ? min(S, first + kRows) : S;
    return (n_end + kRows - 1) / kRows;
  };
  const int my_steps = steps_from(q0);  // the steps this warpgroup computes: [my_first, my_steps)
  const int steps = steps_from(m0) > steps_from(m0 + kRows) ? steps_from(m0) : steps_from(m0 + kRows);
  // With a window, key steps before the block's first query's window are skipped (loaded by no one), and
  // the upper warpgroup's window starts up to one step later than the lower one's.
  const int first = FirstKeyTile(p, m0, kRows) / kRows;
  const int my_first = FirstKeyTile(p, q0, kRows) / kRows;
  // S = Q K^T of step i into acc (issued, not waited for).
  auto issue_scores = [&](float(&acc)[32], int i) {
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      WgmmaM64N64K16<false>(acc, KMajorDesc(aQ, ks), KMajorDesc(aK + (i & 1) * kTile * 2, ks), ks > 0);
    WgmmaCommit();
  };

  // Q (both warpgroups') and K of step `first`; then V of that step and K of the next: every thread issues
  // its share. Step i's K and V go to buffer i % 2.
  LoadTileAsync<D, kForwardThreads>(sQ, q, p.q_stride_t, m0, T);
  LoadTileAsync<D, kForwardThreads>(sQ + kTile, q, p.q_stride_t, m0 + kRows, T);
  LoadTileAsync<D, kForwardThreads>(sK + (first & 1) * kTile, k, p.k_stride_t, first * kRows, S);
  CpAsyncCommit();
  LoadTileAsync<D, kForwardThreads>(sV + (first & 1) * kTile, v, p.v_stride_t, first * kRows, S);
  if (first + 1 < steps)
    LoadTileAsync<D, kForwardThreads>(sK + ((first + 1) & 1) * kTile, k, p.k_stride_t, (first + 1) * kRows, S);
  CpAsyncCommit();
  CpAsyncWait<1>();  // Q, K of step `first`
  FenceProxyAsyncShared();
  __syncthreads();
  float s[32];
  if (my_first == first && my_first < my_steps) {  // warpgroup-uniform, as every branch around a wgmma below
    issue_scores(s, first);
    WgmmaWait<0>();
    WgmmaFenceOperands(s);
  }

  float o[kBlocks][32];
#pragma unroll
  for (int nb = 0; nb < kBlocks; ++nb)
#pragma unroll
    for (int i = 0; i < 32; ++i) o[nb][i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

  // Step i (FlashAttention-3's intra-warpgroup overlap): Q K^T of step i + 1 runs on the tensor cores under
  // the softmax of step i, then P V of step i; the tiles of later steps load a whole step ahead (K of i + 2
  // into K buffer i % 2, V of i + 1 into V buffer (i + 1) % 2, both free once every thread of both
  // warpgroups has passed the barrier after waiting for its Q K^T of step i and P V of step i - 1).
  for (int step = first; step < steps; ++step) {
    const int n0 = step * kRows;
    CpAsyncWait<0>();         // V of this step, K of the next
    FenceProxyAsyncShared();  // ... visible to wgmma's reads after the barrier
    __syncthreads();
    if (step + 2 < steps)
      LoadTileAsync<D, kForwardThreads>(sK + (step & 1) * kTile, k, p.k_stride_t, n0 + 2 * kRows, S);
    if (step + 1 < steps)
      LoadTileAsync<D, kForwardThreads>(sV + ((step + 1) & 1) * kTile, v, p.v_stride_t, n0 + kRows, S);
    CpAsyncCommit();
    // Keys only the other warpgroup's queries see (past this one's causal end, or before its window): only
    // the loads above. A warpgroup that joins late (the upper one under a window) computes its first S here,
    // a step early as every later one is: its K buffer takes step my_first + 2's keys at step my_first.
    if (step < my_first || step >= my_steps) {
      if (step + 1 == my_first && my_first < my_steps) {
        issue_scores(s, my_first);
        WgmmaWait<0>();
        WgmmaFenceOperands(s);
      }
      continue;
    }
    const bool next = step + 1 < my_steps;
    float s_next[32];
    if (next) issue_scores(s_next, step + 1);

    // s[4j + 2r + e]: row rows[r], key n0 + 8j + 2c + e (the D layout of wgmma.cuh).
    const bool mask_tile = TileNeedsMask(p, kCausal, q0, kRows, n0, kRows);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float alpha =
          OnlineSoftmaxRow<8>([&](int j, int e) -> float& { return s[4 * j + 2 * r + e]; }, p, kCausal,
                              mask_tile, b, h, rows[r], n0, c, scale_log2, row_max[r], row_sum[r]);
#pragma unroll
      for (int nb = 0; nb < kBlocks; ++nb)
#pragma unroll
        for (int j = 0; j < 8; ++j) o[nb][4 * j + 2 * r] *= alpha, o[nb][4 * j + 2 * r + 1] *= alpha;
    }

    // P's A fragments: keys 16kk..16kk+15 are D blocks 2kk and 2kk + 1.
    uint32_t pa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pa[kk][0] = Pack(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = Pack(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = Pack(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = Pack(s[8 * kk + 6], s[8 * kk + 7]);
    }
    const uint32_t v_tile = aV + (step & 1) * kTile * 2;
#pragma unroll
    for (int nb = 0; nb < kBlocks; ++nb) WgmmaFenceOperands(o[nb]);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int nb = 0; nb < kBlocks; ++nb)
        WgmmaM64N64K16<true>(o[nb], pa[kk], MNMajorDesc(v_tile, kk, nb), true);
    WgmmaCommit();
    WgmmaWait<0>();  // Q K^T of the next step and P V of this one
#pragma unroll
    for (int nb = 0; nb < kBlocks; ++nb) WgmmaFenceOperands(o[nb]);
    if (next) {
      WgmmaFenceOperands(s_next);
#pragma unroll
      for (int i = 0; i < 32; ++i) s[i] = s_next[i];
    }
  }

  bf16* out = static_cast<bf16*>(p.out) + b * p.out_stride_b + h * p.out_stride_h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (rows[r] >= T) continue;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    bf16* orow = out + static_cast<int64_t>(rows[r]) * p.out_stride_t;
#pragma unroll
    for (int nb = 0; nb < kBlocks; ++nb)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        *reinterpret_cast<__nv_bfloat162*>(orow + nb * 64 + j * 8 + 2 * c) =
            __floats2bfloat162_rn(o[nb][4 * j + 2 * r] * inv, o[nb][4 * j + 2 * r + 1] * inv);
    if (c == 0)
      p.lse[(static_cast<int64_t>(b) * p.NH + h) * p.T + rows[r]] =
          l > 0.0f ? (row_max[r] + log2f(l)) * kLn2 : -INFINITY;
  }
}

template <int D, bool kCausal>
absl::Status LaunchWgmmaForward(const Context& ctx, const AttentionParams& p) {
  const size_t smem = WgmmaSharedBytes(D);
  LMF_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(FlashForwardWgmmaKernel<D, kCausal>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((p.T + kForwardRows - 1) / kForwardRows), static_cast<unsigned>(p.NH),
                  static_cast<unsigned>(p.B));
  FlashForwardWgmmaKernel<D, kCausal><<<grid, kForwardThreads, smem, StreamOf(ctx)>>>(p, p.scale * kLog2e);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("FlashForwardWgmmaKernel");
  return absl::OkStatus();
}

// The dk/dv backward (AttentionBackwardVariant::kWgmmaDkDv), FlashAttention-3's formulation: one warpgroup
// per 64 keys of one kv head (warp w owns keys 16w..16w+15, the m64 rows of every product), looping over the
// group's query heads and, per head, the 64-query blocks that see those keys (from the key block's own
// block when causal). Per step:
//   S^T = K Q^T, dP^T = V dO^T   (64 keys x 64 queries; A = K or V, B = Q or dO, all K-major in smem)
//   P^T = exp2(S^T scale log2(e) - lse2)   (lse2 = lse log2(e) of the query: per COLUMN of S^T)
//   dS^T = P^T o (dP^T - dsum)             (dsum per query: per column)
// With a logit soft-cap (the kSoftCap instantiation) P^T is of the capped score and dS^T carries the cap's
// derivative, recovered from P^T and lse2 (SoftCapGradFromP: S^T is P^T by then, and holding the score too
// would take 32 more registers).
//   dV += P^T dO, dK += dS^T Q   (A = P^T, dS^T rounded to bf16 from the accumulators; B = dO, Q MN-major)
// dK, dV stay in fp32 registers across all steps and are written (=) once, dK times scale: the FA2 kernel's
// contract and arithmetic per element (the same masking predicates, exp2 argument, bf16 rounding of P^T and
// dS^T), in another summation order. The two first products are two commit groups: P^T is computed under
// dP^T, and dV += P^T dO is issued before dS^T is computed, so each elementwise stage runs under a product.
// Q, dO (and the steps' lse2 and dsum, plain stores) of the next step load by cp.async into the other of two
// buffers during this step. Shared memory: K, V, 2 x Q, 2 x dO tiles of 64 x HS bf16 (128B-swizzled like the
// forward's), 2 x 64 lse2 and dsum, 1 KiB of alignment: 50 / 98 KiB at HS 64 / 128. Registers: dK and dV
// (64 / 128 f32 per thread at HS 64 / 128), S^T and dP^T (32 each): __launch_bounds__(128, 2), 255 at most;
// ptxas (sm_90a) gives 172 / 168 (HS 64 full / causal) and 236 (HS 128), no spills.
constexpr size_t WgmmaDkDvSharedBytes(int d) {
  return 6 * static_cast<size_t>(kRows) * d * 2 + 4 * kRows * sizeof(float) + 1024;
}

template <int D, bool kCausal, bool kSoftCap>
__global__ void __launch_bounds__(kThreads, 2)
    FlashBackwardDkDvWgmmaKernel(AttentionBackwardParams bp, const float* dsum, float scale_log2,
                                 float scale) {
  constexpr int kBlocks = D / 64;
  constexpr int kTile = kRows * D;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw_address = SharedAddress(smem_raw);
  bf16* sK = reinterpret_cast<bf16*>(smem_raw + ((1024 - raw_address % 1024) % 1024));
  bf16* sV = sK + kTile;
  bf16* sQ = sV + kTile;                                 // two buffers: step i's Q in buffer i % 2
  bf16* sO = sQ + 2 * kTile;                             // two buffers: step i's dO
  float* sL = reinterpret_cast<float*>(sO + 2 * kTile);  // [2][64] lse2 of the step's queries
  float* sD = sL + 2 * kRows;                            // [2][64] dsum
  const uint32_t aK = SharedAddress(sK), aV = SharedAddress(sV), aQ = SharedAddress(sQ),
                 aO = SharedAddress(sO);

  const AttentionParams& p = bp.forward;
  const int n0 = blockIdx.x * kRows, kvh = blockIdx.y, b = blockIdx.z;
  const int group = static_cast<int>(p.NH / p.NKV), h_begin = kvh * group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int T = static_cast<int>(p.T);
  const int m_begin = kCausal ? n0 : 0;  // query blocks before the key block see none of its keys
  const int m_end = QueryEnd(p, n0, kRows);  // ... nor do the queries past the window's reach (T without one)
  const int blocks_per_head = m_begin < m_end ? (m_end - m_begin + kRows - 1) / kRows : 0;
  const int steps = group * blocks_per_head;
  // Issues Q, dO of step i (head h_begin + i / blocks_per_head) into buffer i % 2 as one cp.async group and
  // stores its lse2 and dsum (zero-filled / -inf past T).
  auto load_step = [&](int i) {
    const int h = h_begin + i / blocks_per_head, m0 = m_begin + (i % blocks_per_head) * kRows, buf = i & 1;
    LoadTileAsync<D>(sQ + buf * kTile, static_cast<const bf16*>(p.q) + b * p.q_stride_b + h * p.q_stride_h,
                     p.q_stride_t, m0, T);
    LoadTileAsync<D>(sO + buf * kTile,
                     static_cast<const bf16*>(bp.dout) + b * p.out_stride_b + h * p.out_stride_h,
                     p.out_stride_t, m0, T);
    CpAsyncCommit();
    const int64_t stat = (static_cast<int64_t>(b) * p.NH + h) * p.T;
    for (int r = threadIdx.x; r < kRows; r += kThreads) {
      const bool in = m0 + r < T;
      sL[buf * kRows + r] = in ? p.lse[stat + m0 + r] * kLog2e : -INFINITY;
      sD[buf * kRows + r] = in ? dsum[stat + m0 + r] : 0.0f;
    }
  };

  float dk[kBlocks][32], dv[kBlocks][32];
#pragma unroll
  for (int nb = 0; nb < kBlocks; ++nb)
#pragma unroll
    for (int i = 0; i < 32; ++i) dk[nb][i] = dv[nb][i] = 0.0f;
  const int keys[2] = {n0 + warp * 16 + g, n0 + warp * 16 + g + 8};
  if (steps > 0) {  // K and V in the first step's cp.async group
    LoadTileAsync<D>(sK, static_cast<const bf16*>(p.k) + b * p.k_stride_b + kvh * p.k_stride_h, p.k_stride_t,
                     n0, static_cast<int>(p.S));
    LoadTileAsync<D>(sV, static_cast<const bf16*>(p.v) + b * p.v_stride_b + kvh * p.v_stride_h, p.v_stride_t,
                     n0, static_cast<int>(p.S));
    load_step(0);
  }
  for (int step = 0; step < steps; ++step) {
    const int h = h_begin + step / blocks_per_head, m0 = m_begin + (step % blocks_per_head) * kRows;
    const int buf = step & 1;
    CpAsyncWait<0>();         // this step's Q, dO (and K, V at the first step)
    FenceProxyAsyncShared();  // ... visible to wgmma's reads after the barrier
    __syncthreads();          // ... and lse2, dsum; every thread retired the previous step's wgmma
    if (step + 1 < steps) load_step(step + 1);
    const uint32_t q_tile = aQ + buf * kTile * 2, o_tile = aO + buf * kTile * 2;
    const float* lse2 = sL + buf * kRows;
    const float* ds = sD + buf * kRows;

    float st[32], dpt[32];  // S^T, dP^T: st[4j + 2r + e] is key keys[r], query m0 + 8j + 2c + e
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      WgmmaM64N64K16<false>(st, KMajorDesc(aK, ks), KMajorDesc(q_tile, ks), ks > 0);
    WgmmaCommit();
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      WgmmaM64N64K16<false>(dpt, KMajorDesc(aV, ks), KMajorDesc(o_tile, ks), ks > 0);
    WgmmaCommit();
    WgmmaWait<1>();  // S^T (dP^T runs on)
    WgmmaFenceOperands(st);

    const bool mask_tile = TileNeedsMask(p, kCausal, m0, kRows, n0, kRows);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = 8 * j + 2 * c + (e & 1);
        const bool hidden =
            lse2[qi] == -INFINITY || (mask_tile && Masked(p, kCausal, b, h, m0 + qi, keys[e >> 1]));
        const float x = kSoftCap ? ScoreLog2(p, st[4 * j + e], scale_log2) : st[4 * j + e] * scale_log2;
        st[4 * j + e] = hidden ? 0.0f : exp2f(x - lse2[qi]);  // P^T
      }
    // P^T's A fragments: queries 16kk..16kk+15 are D blocks 2kk and 2kk + 1.
    uint32_t pa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) pa[kk][i] = Pack(st[8 * kk + 2 * i], st[8 * kk + 2 * i + 1]);
#pragma unroll
    for (int nb = 0; nb < kBlocks; ++nb) WgmmaFenceOperands(dv[nb]);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int nb = 0; nb < kBlocks; ++nb)
        WgmmaM64N64K16<true>(dv[nb], pa[kk], MNMajorDesc(o_tile, kk, nb), true);
    WgmmaCommit();
    WgmmaWait<1>();  // dP^T (dV += P^T dO runs on)
    WgmmaFenceOperands(dpt);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = 8 * j + 2 * c + (e & 1);
        const float d = st[4 * j + e] * (dpt[4 * j + e] - ds[qi]);  // dS^T
        dpt[4 * j + e] = kSoftCap ? d * SoftCapGradFromP(p, st[4 * j + e], lse2[qi]) : d;
      }
    uint32_t da[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) da[kk][i] = Pack(dpt[8 * kk + 2 * i], dpt[8 * kk + 2 * i + 1]);
#pragma unroll
    for (int nb = 0; nb < kBlocks; ++nb) WgmmaFenceOperands(dk[nb]);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int nb = 0; nb < kBlocks; ++nb)
        WgmmaM64N64K16<true>(dk[nb], da[kk], MNMajorDesc(q_tile, kk, nb), true);
    WgmmaCommit();
    WgmmaWait<0>();  // dV and dK: their operand buffers are reloaded after the next step's barrier
#pragma unroll
    for (int nb = 0; nb < kBlocks; ++nb) WgmmaFenceOperands(dk[nb]), WgmmaFenceOperands(dv[nb]);
  }

  bf16* dkp = static_cast<bf16*>(bp.dk) + b * p.k_stride_b + kvh * p.k_stride_h;
  bf16* dvp = static_cast<bf16*>(bp.dv) + b * p.v_stride_b + kvh * p.v_stride_h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= p.S) continue;
    bf16* kr = dkp + static_cast<int64_t>(keys[r]) * p.k_stride_t;
    bf16* vr = dvp + static_cast<int64_t>(keys[r]) * p.v_stride_t;
#pragma unroll
    for (int nb = 0; nb < kBlocks; ++nb)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = nb * 64 + 8 * j + 2 * c;
        *reinterpret_cast<__nv_bfloat162*>(kr + col) =
            __floats2bfloat162_rn(dk[nb][4 * j + 2 * r] * scale, dk[nb][4 * j + 2 * r + 1] * scale);
        *reinterpret_cast<__nv_bfloat162*>(vr + col) =
            __floats2bfloat162_rn(dv[nb][4 * j + 2 * r], dv[nb][4 * j + 2 * r + 1]);
      }
  }
}

template <int D, bool kCausal, bool kSoftCap>
absl::Status LaunchWgmmaDkDv(const Context& ctx, const AttentionBackwardParams& bp, const float* dsum) {
  const AttentionParams& p = bp.forward;
  const size_t smem = WgmmaDkDvSharedBytes(D);
  LMF_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(FlashBackwardDkDvWgmmaKernel<D, kCausal, kSoftCap>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((p.S + kRows - 1) / kRows), static_cast<unsigned>(p.NKV),
                  static_cast<unsigned>(p.B));
  FlashBackwardDkDvWgmmaKernel<D, kCausal, kSoftCap>
      <<<grid, kThreads, smem, StreamOf(ctx)>>>(bp, dsum, p.scale * kLog2e, p.scale);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("FlashBackwardDkDvWgmmaKernel");
  return absl::OkStatus();
}

// The dq backward (AttentionBackwardVariant::kWgmma, after attention_cuda.cu's dsum kernel and beside the
// dk/dv kernel above): one warpgroup per 64 queries of one query head (warp w owns queries 16w..16w+15, the
// m64 rows of every product), looping over the 64-key blocks those queries see (up to the block's last
// query when causal, as the forward). Per step:
//   S = Q K^T, dP = dO V^T   (64 queries x 64 keys; A = Q or dO, B = K or V, all K-major in smem)
//   P = exp2(S scale log2(e) - lse2)   (lse2 = lse log2(e): per ROW)
//   dS = P o (dP - dsum)               (dsum per row)
// With a soft-cap (kSoftCap), as the dk/dv kernel: P of the capped score, the derivative from P and lse2.
//   dQ += dS K   (A = dS rounded to bf16 from the accumulators; B = the same K tile MN-major)
// dQ stays in fp32 registers across all steps and is written (=) once, times scale: the FA2 dq kernel's
// contract and arithmetic per element (the same masking predicates, exp2 argument, fp32 P, bf16 rounding of
// dS), in another summation order. S and dP are two commit groups (P is computed under dP). Q, dO, lse2 and
// dsum load once; K and V of the next step load by cp.async into the other of two buffers during this step
// (free: every thread retired this step's wgmma before the next barrier). Shared memory: Q, dO, 2 x K,
// 2 x V tiles of 64 x HS bf16 (128B-swizzled like the forward's), 1 KiB of alignment: 49 / 97 KiB at HS
// 64 / 128. Registers: dQ (32 / 64 f32 per thread at HS 64 / 128), S and dP (32 each).
constexpr size_t WgmmaDqSharedBytes(int d) { return 6 * static_cast<size_t>(kRows) * d * 2 + 1024; }

template <int D, bool kCausal, bool kSoftCap>
__global__ void __launch_bounds__(kThreads, 2)
    FlashBackwardDqWgmmaKernel(AttentionBackwardParams bp, const float* dsum, float scale_log2, float scale) {
  constexpr int kBlocks = D / 64;
  constexpr int kTile = kRows * D;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw_address = SharedAddress(smem_raw);
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw + ((1024 - raw_address % 1024) % 1024));
  bf16* sO = sQ + kTile;      // dO
  bf16* sK = sO + kTile;      // two buffers: step i's K in buffer i % 2
  bf16* sV = sK + 2 * kTile;  // two buffers: step i's V in buffer i % 2
  const uint32_t aQ = SharedAddress(sQ), aO = SharedAddress(sO), aK = SharedAddress(sK),
                 aV = SharedAddress(sV);

  const AttentionParams& p = bp.forward;
  const int m0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (p.NH / p.NKV);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const bf16* k = static_cast<const bf16*>(p.k) + b * p.k_stride_b + kvh * p.k_stride_h;
  const bf16* v = static_cast<const bf16*>(p.v) + b * p.v_stride_b + kvh * p.v_stride_h;
  const int T = static_cast<int>(p.T), S = static_cast<int>(p.S);
  const int n_end = kCausal ? min(S, m0 + kRows) : S;
  const int steps = (n_end + kRows - 1) / kRows;
  const int first = FirstKeyTile(p, m0, kRows) / kRows;  // key steps before every query's window: skipped

  // Q, dO and K, V of step `first` in one cp.async group (step i's K and V in buffer i % 2).
  LoadTileAsync<D>(sQ, static_cast<const bf16*>(p.q) + b * p.q_stride_b + h * p.q_stride_h, p.q_stride_t, m0,
                   T);
  LoadTileAsync<D>(sO, static_cast<const bf16*>(bp.dout) + b * p.out_stride_b + h * p.out_stride_h,
                   p.out_stride_t, m0, T);
  LoadTileAsync<D>(sK + (first & 1) * kTile, k, p.k_stride_t, first * kRows, S);
  LoadTileAsync<D>(sV + (first & 1) * kTile, v, p.v_stride_t, first * kRows, S);
  CpAsyncCommit();
  const int rows[2] = {m0 + warp * 16 + g, m0 + warp * 16 + g + 8};
  float lse2[2], ds_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t idx = (static_cast<int64_t>(b) * p.NH + h) * p.T + rows[r];
    lse2[r] = rows[r] < T ? p.lse[idx] * kLog2e : -INFINITY;
    ds_row[r] = rows[r] < T ? dsum[idx] : 0.0f;
  }
  float dq[kBlocks][32];
#pragma unroll
  for (int nb = 0; nb < kBlocks; ++nb)
#pragma unroll
    for (int i = 0; i < 32; ++i) dq[nb][i] = 0.0f;

  for (int step = first; step < steps; ++step) {
    const int n0 = step * kRows, buf = step & 1;
    CpAsyncWait<0>();         // K, V of this step (and Q, dO at the first)
    FenceProxyAsyncShared();  // ... visible to wgmma's reads after the barrier
    __syncthreads();          // ... and every thread retired the previous step's wgmma (its buffer is free)
    if (step + 1 < steps) {
      LoadTileAsync<D>(sK + (buf ^ 1) * kTile, k, p.k_stride_t, n0 + kRows, S);
      LoadTileAsync<D>(sV + (buf ^ 1) * kTile, v, p.v_stride_t, n0 + kRows, S);
    }
    CpAsyncCommit();
    const uint32_t k_tile = aK + buf * kTile * 2, v_tile = aV + buf * kTile * 2;

    float s[32], dp[32];  // S, dP: s[4j + 2r + e] is query rows[r], key n0 + 8j + 2c + e
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      WgmmaM64N64K16<false>(s, KMajorDesc(aQ, ks), KMajorDesc(k_tile, ks), ks > 0);
    WgmmaCommit();
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      WgmmaM64N64K16<false>(dp, KMajorDesc(aO, ks), KMajorDesc(v_tile, ks), ks > 0);
    WgmmaCommit();
    WgmmaWait<1>();  // S (dP runs on)
    WgmmaFenceOperands(s);

    const bool mask_tile = TileNeedsMask(p, kCausal, m0, kRows, n0, kRows);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const bool hidden = lse2[r] == -INFINITY ||
                            (mask_tile && Masked(p, kCausal, b, h, rows[r], n0 + 8 * j + 2 * c + (e & 1)));
        const float x = kSoftCap ? ScoreLog2(p, s[4 * j + e], scale_log2) : s[4 * j + e] * scale_log2;
        s[4 * j + e] = hidden ? 0.0f : exp2f(x - lse2[r]);  // P
      }
    WgmmaWait<0>();  // dP
    WgmmaFenceOperands(dp);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float d = s[4 * j + e] * (dp[4 * j + e] - ds_row[e >> 1]);  // dS
        dp[4 * j + e] = kSoftCap ? d * SoftCapGradFromP(p, s[4 * j + e], lse2[e >> 1]) : d;
      }
    // dS's A fragments: keys 16kk..16kk+15 are D blocks 2kk and 2kk + 1.
    uint32_t da[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) da[kk][i] = Pack(dp[8 * kk + 2 * i], dp[8 * kk + 2 * i + 1]);
#pragma unroll
    for (int nb = 0; nb < kBlocks; ++nb) WgmmaFenceOperands(dq[nb]);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int nb = 0; nb < kBlocks; ++nb)
        WgmmaM64N64K16<true>(dq[nb], da[kk], MNMajorDesc(k_tile, kk, nb), true);
    WgmmaCommit();
    WgmmaWait<0>();  // dQ: this step's K buffer is reloaded after the next step's barrier
#pragma unroll
    for (int nb = 0; nb < kBlocks; ++nb) WgmmaFenceOperands(dq[nb]);
  }

  bf16* dqp = static_cast<bf16*>(bp.dq) + b * p.q_stride_b + h * p.q_stride_h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= T) continue;
    bf16* row = dqp + static_cast<int64_t>(rows[r]) * p.q_stride_t;
#pragma unroll
    for (int nb = 0; nb < kBlocks; ++nb)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        *reinterpret_cast<__nv_bfloat162*>(row + nb * 64 + 8 * j + 2 * c) =
            __floats2bfloat162_rn(dq[nb][4 * j + 2 * r] * scale, dq[nb][4 * j + 2 * r + 1] * scale);
  }
}

template <int D, bool kCausal, bool kSoftCap>
absl::Status LaunchWgmmaDq(const Context& ctx, const AttentionBackwardParams& bp, const float* dsum) {
  const AttentionParams& p = bp.forward;
  const size_t smem = WgmmaDqSharedBytes(D);
  LMF_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(FlashBackwardDqWgmmaKernel<D, kCausal, kSoftCap>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((p.T + kRows - 1) / kRows), static_cast<unsigned>(p.NH),
                  static_cast<unsigned>(p.B));
  FlashBackwardDqWgmmaKernel<D, kCausal, kSoftCap>
      <<<grid, kThreads, smem, StreamOf(ctx)>>>(bp, dsum, p.scale * kLog2e, p.scale);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("FlashBackwardDqWgmmaKernel");
  return absl::OkStatus();
}

// Calls launch(D, kCausal, kSoftCap), each a std::integral_constant, for p's head size (64 or 128),
// causality and soft-cap: the eight instantiations of each backward kernel.
template <typename Launch>
absl::Status WithBackwardInstantiation(const AttentionParams& p, const Launch& launch) {
  const auto cap = [&](auto d, auto causal) {
    return p.softcap > 0.0f ? launch(d, causal, std::true_type()) : launch(d, causal, std::false_type());
  };
  const auto causal = [&](auto d) { return p.causal ? cap(d, std::true_type()) : cap(d, std::false_type()); };
  return p.HS == 64 ? causal(std::integral_constant<int, 64>()) : causal(std::integral_constant<int, 128>());
}

}  // namespace

namespace internal {

absl::Status RequireSm90a(const Context& ctx, const char* what) {
  int major = 0, minor = 0;
  LMF_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx.device.index));
  LMF_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ctx.device.index));
  if (major != 9 || minor != 0)
    return absl::UnimplementedError(absl::StrCat("attention: ", what, " runs on sm_90a (H100/H200) only; ",
                                                 "device ", ctx.device.index, " is sm_", major, minor));
  return absl::OkStatus();
}

// Called by AttentionBackwardWithVariant (kWgmmaDkDv) after its checks (bf16, sm_90a) and the dsum kernel,
// for B * NH * T > 0.
absl::Status AttentionBackwardDkDvWgmma(const Context& ctx, const AttentionBackwardParams& bp,
                                        const float* dsum) {
  return WithBackwardInstantiation(bp.forward, [&](auto d, auto causal, auto cap) {
    return LaunchWgmmaDkDv<decltype(d)::value, decltype(causal)::value, decltype(cap)::value>(ctx, bp, dsum);
  });
}

// Called by AttentionBackwardWithVariant (kWgmma) after its checks (bf16, sm_90a) and the dsum kernel, for
// B * NH * T > 0.
absl::Status AttentionBackwardDqWgmma(const Context& ctx, const AttentionBackwardParams& bp,
                                      const float* dsum) {
  return WithBackwardInstantiation(bp.forward, [&](auto d, auto causal, auto cap) {
    return LaunchWgmmaDq<decltype(d)::value, decltype(causal)::value, decltype(cap)::value>(ctx, bp, dsum);
  });
}

// Called by AttentionForwardWithVariant after its argument checks, for bf16 with B * NH * T > 0.
absl::Status AttentionForwardWgmma(const Context& ctx, const AttentionParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(RequireSm90a(ctx, "the wgmma forward"));
  if (p.HS == 64)
    return p.causal ? LaunchWgmmaForward<64, true>(ctx, p) : LaunchWgmmaForward<64, false>(ctx, p);
  return p.causal ? LaunchWgmmaForward<128, true>(ctx, p) : LaunchWgmmaForward<128, false>(ctx, p);
}

}  // namespace internal
}  // namespace lmf::kernels::cuda
