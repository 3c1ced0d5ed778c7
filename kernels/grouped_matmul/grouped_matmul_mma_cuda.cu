// The bf16 tensor-core grouped GEMM (grouped_matmul.h; picked by grouped_matmul_cuda.cu where
// grouped::MmaSupports holds): mma.sync m16n8k16 bf16 with fp32 accumulation (kernels/cuda/mma.cuh, sm_80+,
// which sm_90a also runs). Every product is out(m, c) = sum_i A(m, i) B(i, c) over 64 x 64 output tiles:
//
//   forward  y_g  = x_g w_g^T:   A = x rows (stored [m][i]),   B(i, c) = w_g[c, i] (stored [c][i])
//   dx       dx_g = dy_g w_g:    A = dy rows (stored [m][i]),  B(i, c) = w_g[i, c] (stored [i][c])
//   dw       dw_g += dy_g^T x_g: A(m, i) = dy[i, m] ([i][m]),  B(i, c) = x[i, c]   (stored [i][c])
//
// An operand is stored "outer-major" ([m or c][i]: depth contiguous) or "depth-major" ([i][m or c]); its 64 x
// 32 tile per depth step comes into shared memory in the same layout by cp.async, 16 bytes a copy
// (zero-filled past the group's rows or the matrix edge), double-buffered one step ahead of the math, rows
// padded by 8 bf16 (conflict-free ldmatrix). Fragments come out through ldmatrix, .trans for A stored
// depth-major and for B stored depth-major. 128 threads, 4 warps of 32 x 32 outputs each (2 m16 x 4 n8 mma
// tiles). The row products' grid covers every group's 64-row tiles (blocks find their group from the device
// offsets); dw is one block per (64 x 64 tile of w_g, group) walking the group's rows in order. Each output
// element is one thread's fixed-order sum: deterministic, no atomics. Checked on the CPU emulation; not yet
// run on a GPU.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/grouped_matmul/grouped_matmul_cuda.cuh"

namespace lmf::kernels::cuda::grouped {
namespace {

constexpr int kOuter = 64;                     // output tile rows and columns
constexpr int kDepth = 32;                     // depth step
constexpr int kThreads = 128;                  // 4 warps, 2 x 2 over the output tile
constexpr int kOuterMajorStride = kDepth + 8;  // shared row stride of a tile stored [outer][depth]
constexpr int kDepthMajorStride = kOuter + 8;  // ... stored [depth][outer]
constexpr int kTileElems = kOuter * kOuterMajorStride > kDepth* kDepthMajorStride ? kOuter* kOuterMajorStride
                                                                                  : kDepth* kDepthMajorStride;
static_assert(kOuterMajorStride % 8 == 0 && kDepthMajorStride % 8 == 0,
              "ldmatrix rows must be 16-byte aligned");
static_assert(kOuter * kDepth / 8 == 2 * kThreads, "each thread copies two 16-byte chunks of a tile");

// One operand of a product: element (o, d) (o: output row m for A, output column c for B; d: depth) at
// p[o * ld + d] (outer-major) or p[d * ld + o] (depth-major); o < outer, d < depth are in the matrix.
struct Operand {
  const bf16* p;
  int64_t ld, outer, depth;
};

// Issues the cp.async copies of the operand's tile (outer o0..o0+63, depth d0..d0+31) into `s`, in its
// layout. The contiguous extent (depth for outer-major, outer for depth-major) is a multiple of 8: a 16-byte
// chunk is wholly in the matrix or wholly out (zero-filled).
template <bool kDepthMajor>
__device__ __forceinline__ void LoadTileAsync(bf16* s, const Operand& a, int64_t o0, int64_t d0) {
#pragma unroll
  for (int e = threadIdx.x; e < kOuter * kDepth / 8; e += kThreads) {
    if (kDepthMajor) {  // 32 rows of depth, 8 chunks of outer each
      const int d = e / (kOuter / 8), oc = e % (kOuter / 8) * 8;
      const bool in = d0 + d < a.depth && o0 + oc < a.outer;
      CpAsync16(s + d * kDepthMajorStride + oc, in ? a.p + (d0 + d) * a.ld + o0 + oc : a.p, in);
    } else {  // 64 rows of outer, 4 chunks of depth each
      const int o = e / (kDepth / 8), dc = e % (kDepth / 8) * 8;
      const bool in = o0 + o < a.outer && d0 + dc < a.depth;
      CpAsync16(s + o * kOuterMajorStride + dc, in ? a.p + (o0 + o) * a.ld + d0 + dc : a.p, in);
    }
  }
}

// Four 8 x 8 matrices of a tile into r: this lane gives the address of row `row8` of its matrix, whose
// corner is at (outer, depth). A tile stored depth-major holds them transposed (ldmatrix.trans), its rows
// being depths.
template <bool kDepthMajor>
__device__ __forceinline__ void LoadMatrices(uint32_t (&r)[4], const bf16* s, int outer, int depth, int row8) {
  if (kDepthMajor) {
    LdMatrixX4Trans(r[0], r[1], r[2], r[3], s + (depth + row8) * kDepthMajorStride + outer);
  } else {
    LdMatrixX4(r[0], r[1], r[2], r[3], s + (outer + row8) * kOuterMajorStride + depth);
  }
}

// The A fragment of tile rows m..m+15, depth k..k+15: its matrices rows +0..7, +8..15 at depth +0..7, then
// the same at depth +8..15.
template <bool kDepthMajor>
__device__ __forceinline__ void LoadFragmentA(uint32_t (&a)[4], const bf16* s, int m, int k, int lane) {
  LoadMatrices<kDepthMajor>(a, s, m + ((lane >> 3) & 1) * 8, k + (lane >> 4) * 8, lane & 7);
}

// The B fragments {b[0], b[1]} of tile columns c..c+7 and {b[2], b[3]} of c+8..c+15, depth k..k+15: its
// matrices depth +0..7, +8..15 at columns +0..7, then the same at columns +8..15.
template <bool kDepthMajor>
__device__ __forceinline__ void LoadFragmentsB(uint32_t (&b)[4], const bf16* s, int c, int k, int lane) {
  LoadMatrices<kDepthMajor>(b, s, c + (lane >> 4) * 8, k + ((lane >> 3) & 1) * 8, lane & 7);
}

// The warp's 32 x 32 outputs of the block's tile (A rows m0.., B columns c0..) summed over the whole depth:
// acc[mi][ni][e] is tile row 32 (warp % 2) + 16 mi + lane / 4 + 8 (e >= 2), tile column 32 (warp / 2) + 8 ni
// + 2 (lane % 4) + e % 2 (the mma C layout). sa, sb: two tiles each.
template <bool kADepthMajor, bool kBDepthMajor>
__device__ __forceinline__ void TileProduct(const Operand& a, const Operand& b, int64_t m0, int64_t c0,
                                            bf16* sa, bf16* sb, float (&acc)[2][4][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wm = (warp & 1) * 32, wc = (warp >> 1) * 32;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;
  const int64_t steps = (a.depth + kDepth - 1) / kDepth;
  LoadTileAsync<kADepthMajor>(sa, a, m0, 0);
  LoadTileAsync<kBDepthMajor>(sb, b, c0, 0);
  CpAsyncCommit();
  for (int64_t step = 0; step < steps; ++step) {
    const int stage = static_cast<int>(step & 1);
    if (step + 1 < steps) {  // the next step's tiles land under this step's math
      LoadTileAsync<kADepthMajor>(sa + (1 - stage) * kTileElems, a, m0, (step + 1) * kDepth);
      LoadTileAsync<kBDepthMajor>(sb + (1 - stage) * kTileElems, b, c0, (step + 1) * kDepth);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const bf16 *ta = sa + stage * kTileElems, *tb = sb + stage * kTileElems;
#pragma unroll
    for (int k = 0; k < kDepth; k += 16) {
      uint32_t af[2][4], bfr[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) LoadFragmentA<kADepthMajor>(af[mi], ta, wm + 16 * mi, k, lane);
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) LoadFragmentsB<kBDepthMajor>(bfr[nj], tb, wc + 16 * nj, k, lane);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          Mma(acc[mi][ni], af[mi], bfr[ni / 2][ni % 2 * 2], bfr[ni / 2][ni % 2 * 2 + 1]);
    }
    __syncthreads();  // every warp is done with this stage before the next step's copies overwrite it
  }
}

// The tile position of acc[mi][ni][e] (see TileProduct).
__device__ __forceinline__ int TileRow(int mi, int e) {
  return ((threadIdx.x >> 5) & 1) * 32 + 16 * mi + ((threadIdx.x & 31) >> 2) + (e >= 2 ? 8 : 0);
}
__device__ __forceinline__ int TileCol(int ni, int e) {
  return (threadIdx.x >> 6) * 32 + 8 * ni + 2 * (threadIdx.x & 3) + (e & 1);
}

// out[r, c] = sum_i a[r, i] b_g(i, c) (+ bias_g[c]) for the rows r of the block's group row tile, c < cols,
// i < depth; kBDepthMajor false: b_g(i, c) = w_g[c, i] (the forward), true: b_g(i, c) = w_g[i, c] (dx).
template <bool kBDepthMajor>
__global__ void __launch_bounds__(kThreads)
    RowBlockMmaKernel(int64_t groups, const int32_t* offsets, int64_t depth, int64_t cols, const bf16* a,
                      const bf16* w, const bf16* bias, bf16* out) {
  __shared__ __align__(16) bf16 sa[2 * kTileElems];
  __shared__ __align__(16) bf16 sb[2 * kTileElems];
  int64_t g = 0, first = 0, end = 0;
  if (!FindRowTile<kOuter>(offsets, groups, blockIdx.x, &g, &first, &end)) return;  // uniform over the block
  const int64_t c0 = int64_t{blockIdx.y} * kOuter;
  const Operand oa{a + first * depth, depth, end - first, depth};
  const Operand ob{w + g * cols * depth, kBDepthMajor ? cols : depth, cols, depth};
  float acc[2][4][4];
  TileProduct<false, kBDepthMajor>(oa, ob, 0, c0, sa, sb, acc);
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = first + TileRow(mi, e), col = c0 + TileCol(ni, e);
        if (row >= end || col >= cols) continue;
        const float b = bias != nullptr ? ToFloat(bias[g * cols + col]) : 0.0f;
        out[row * cols + col] = FromFloat<bf16>(acc[mi][ni][e] + b);
      }
    }
  }
}

// dw_g[n, k] += sum over the group's rows r of dy[r, n] x[r, k]; grid (K tiles, N tiles, G).
__global__ void __launch_bounds__(kThreads)
    WeightGradMmaKernel(const int32_t* offsets, int64_t k_dim, int64_t n_dim, const bf16* x, const bf16* dy,
                        float* dw) {
  __shared__ __align__(16) bf16 sa[2 * kTileElems];
  __shared__ __align__(16) bf16 sb[2 * kTileElems];
  const int64_t g = blockIdx.z, k0 = int64_t{blockIdx.x} * kOuter, n0 = int64_t{blockIdx.y} * kOuter;
  const int64_t first = offsets[g], rows = offsets[g + 1] - first;
  if (rows == 0) return;  // an empty group adds nothing (uniform over the block)
  const Operand oa{dy + first * n_dim, n_dim, n_dim, rows};  // A(n, r) = dy[first + r, n]
  const Operand ob{x + first * k_dim, k_dim, k_dim, rows};   // B(r, k) = x[first + r, k]
  float acc[2][4][4];
  TileProduct<true, true>(oa, ob, n0, k0, sa, sb, acc);
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t n = n0 + TileRow(mi, e), k = k0 + TileCol(ni, e);
        if (n < n_dim && k < k_dim) dw[(g * n_dim + n) * k_dim + k] += acc[mi][ni][e];
      }
    }
  }
}

unsigned TilesOf(int64_t n) { return static_cast<unsigned>((n + kOuter - 1) / kOuter); }
unsigned RowTilesOf(int64_t m, int64_t groups) {
  return static_cast<unsigned>((m + kOuter - 1) / kOuter + groups);
}
bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool MmaSupports(DType dtype, int64_t k, int64_t n, const void* x, const void* w, const void* y_or_dy,
                 const void* dx) {
  return dtype == DType::kBF16 && k > 0 && n > 0 && k % 8 == 0 && n % 8 == 0 && Aligned(x) && Aligned(w) &&
         Aligned(y_or_dy) && Aligned(dx);
}

absl::Status MmaForward(const Context& ctx, const GroupedMatmulParams& p) {
  const dim3 grid(RowTilesOf(p.M, p.G), TilesOf(p.N));
  RowBlockMmaKernel<false><<<grid, kThreads, 0, StreamOf(ctx)>>>(
      p.G, p.offsets, p.K, p.N, static_cast<const bf16*>(p.x), static_cast<const bf16*>(p.w),
      static_cast<const bf16*>(p.bias), static_cast<bf16*>(p.y));
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("GroupedMatmulMmaKernel");
  return absl::OkStatus();
}

absl::Status MmaBackwardProducts(const Context& ctx, const GroupedMatmulBackwardParams& p) {
  const cudaStream_t stream = StreamOf(ctx);
  if (p.dx != nullptr) {
    const dim3 grid(RowTilesOf(p.M, p.G), TilesOf(p.K));
    RowBlockMmaKernel<true>
        <<<grid, kThreads, 0, stream>>>(p.G, p.offsets, p.N, p.K, static_cast<const bf16*>(p.dy),
                                        static_cast<const bf16*>(p.w), nullptr, static_cast<bf16*>(p.dx));
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("GroupedMatmulDxMmaKernel");
  }
  if (p.dw != nullptr) {
    const dim3 grid(TilesOf(p.K), TilesOf(p.N), static_cast<unsigned>(p.G));
    WeightGradMmaKernel<<<grid, kThreads, 0, stream>>>(p.offsets, p.K, p.N, static_cast<const bf16*>(p.x),
                                                       static_cast<const bf16*>(p.dy), p.dw);
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("GroupedMatmulWeightGradMmaKernel");
  }
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda::grouped
