// The CUDA grouped GEMM (grouped_matmul.h): the dispatch between its two kernel families, and the scalar
// one (fp32 or bf16 storage, any shape, fp32 accumulation; the bf16 tensor-core kernels are in
// grouped_matmul_mma_cuda.cu). Row-block products (forward y = x w_g^T, backward dx = dy w_g) are one
// kernel: a block computes a 32 x 32 tile of the output from 32 x 32 tiles of its rows and of w_g staged in
// shared memory (as fp32), 256 threads each holding 2 x 2 accumulators. The grid's x covers every group's row
// tiles (at most ceil(M / 32) + G of them); a block walks the device offsets to find its group and tile, and
// blocks past the last tile return at once. The weight gradient is one block per (32 x 32 tile of w_g,
// group), summing the group's rows 32 at a time in order; the bias gradient one thread per (group, column).
// Each output element is one thread's fixed-order sum: deterministic, no atomics. No double buffering; the
// emulation cannot time it and it has not run on a GPU.
#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/grouped_matmul/grouped_matmul.h"
#include "kernels/grouped_matmul/grouped_matmul_cuda.cuh"

namespace lmf::kernels::cuda {
namespace {

constexpr int kTile = 32;       // output tile and k step
constexpr int kThreads = 256;   // 16 x 16 threads, 2 x 2 outputs each
constexpr int kHalf = kTile / 2;

// out[r, c] = sum_i a[r, i] b_g(i, c) (+ bias_g[c]) for the group's rows r, c < cols, i < depth.
// kTransposedW: b_g(i, c) = w_g[c, i] (w_g is (cols, depth): the forward); else b_g(i, c) = w_g[i, c]
// (w_g is (depth, cols): dx = dy w_g).
template <typename T, bool kTransposedW>
__global__ void RowBlockGemmKernel(int64_t groups, const int32_t* offsets, int64_t depth, int64_t cols, const T* a,
                                   const T* w, const T* bias, T* out) {
  __shared__ float as[kTile][kTile + 1];  // [row][i]
  __shared__ float bs[kTile][kTile + 1];  // [i][col]
  int64_t g = 0, first = 0, end = 0;
  // Blocks past the last tile return at once (uniform over the block).
  if (!grouped::FindRowTile<kTile>(offsets, groups, blockIdx.x, &g, &first, &end)) return;
  const int64_t col0 = int64_t{blockIdx.y} * kTile;
  const T* wg = w + g * cols * depth;
  const int tx = threadIdx.x % kHalf, ty = threadIdx.x / kHalf;
  float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  for (int64_t i0 = 0; i0 < depth; i0 += kTile) {
    for (int e = threadIdx.x; e < kTile * kTile; e += kThreads) {
      const int r = e / kTile, i = e % kTile;  // as[r][i]: consecutive threads read consecutive i
      const int64_t row = first + r, ii = i0 + i;
      as[r][i] = row < end && ii < depth ? ToFloat(a[row * depth + ii]) : 0.0f;
      if (kTransposedW) {  // bs[i][c] = w_g[c, i]: consecutive threads read consecutive i of row c
        const int c = e / kTile, k = e % kTile;
        const int64_t col = col0 + c, kk = i0 + k;
        bs[k][c] = col < cols && kk < depth ? ToFloat(wg[col * depth + kk]) : 0.0f;
      } else {  // bs[i][c] = w_g[i, c]
        const int k = e / kTile, c = e % kTile;
        const int64_t col = col0 + c, kk = i0 + k;
        bs[k][c] = col < cols && kk < depth ? ToFloat(wg[kk * cols + col]) : 0.0f;
      }
    }
    __syncthreads();
#pragma unroll 8
    for (int i = 0; i < kTile; ++i) {
      const float a0 = as[ty][i], a1 = as[ty + kHalf][i], b0 = bs[i][tx], b1 = bs[i][tx + kHalf];
      acc[0][0] += a0 * b0, acc[0][1] += a0 * b1, acc[1][0] += a1 * b0, acc[1][1] += a1 * b1;
    }
    __syncthreads();
  }
  for (int dr = 0; dr < 2; ++dr) {
    for (int dc = 0; dc < 2; ++dc) {
      const int64_t row = first + ty + dr * kHalf, col = col0 + tx + dc * kHalf;
      if (row >= end || col >= cols) continue;
      const float b = bias != nullptr ? ToFloat(bias[g * cols + col]) : 0.0f;
      out[row * cols + col] = FromFloat<T>(acc[dr][dc] + b);
    }
  }
}

// dw_g[n, k] += sum over the group's rows r of dy[r, n] x[r, k]; grid (K tiles, N tiles, G).
template <typename T>
__global__ void WeightGradKernel(const int32_t* offsets, int64_t k_dim, int64_t n_dim, const T* x, const T* dy,
                                 float* dw) {
  __shared__ float ds[kTile][kTile + 1];  // [row][n]
  __shared__ float xs[kTile][kTile + 1];  // [row][k]
  const int64_t g = blockIdx.z, k0 = int64_t{blockIdx.x} * kTile, n0 = int64_t{blockIdx.y} * kTile;
  const int64_t first = offsets[g], end = offsets[g + 1];
  const int tx = threadIdx.x % kHalf, ty = threadIdx.x / kHalf;  // tx across k, ty across n
  float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  for (int64_t r0 = first; r0 < end; r0 += kTile) {
    for (int e = threadIdx.x; e < kTile * kTile; e += kThreads) {
      const int r = e / kTile, c = e % kTile;
      const int64_t row = r0 + r;
      ds[r][c] = row < end && n0 + c < n_dim ? ToFloat(dy[row * n_dim + n0 + c]) : 0.0f;
      xs[r][c] = row < end && k0 + c < k_dim ? ToFloat(x[row * k_dim + k0 + c]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int r = 0; r < kTile; ++r) {
      const float d0 = ds[r][ty], d1 = ds[r][ty + kHalf], x0 = xs[r][tx], x1 = xs[r][tx + kHalf];
      acc[0][0] += d0 * x0, acc[0][1] += d0 * x1, acc[1][0] += d1 * x0, acc[1][1] += d1 * x1;
    }
    __syncthreads();
  }
  if (end == first) return;  // an empty group adds nothing (+= 0 would still be exact; skip the traffic)
  for (int dn = 0; dn < 2; ++dn) {
    for (int dk = 0; dk < 2; ++dk) {
      const int64_t n = n0 + ty + dn * kHalf, k = k0 + tx + dk * kHalf;
      if (n < n_dim && k < k_dim) dw[(g * n_dim + n) * k_dim + k] += acc[dn][dk];
    }
  }
}

// dbias_g[n] += sum over the group's rows of dy[r, n], one thread per (g, n) in row order.
template <typename T>
__global__ void BiasGradKernel(int64_t groups, const int32_t* offsets, int64_t n_dim, const T* dy, float* dbias) {
  LMF_GRID_STRIDE(gn, groups * n_dim) {
    const int64_t g = gn / n_dim, n = gn % n_dim;
    float sum = 0.0f;
    for (int64_t r = offsets[g]; r < offsets[g + 1]; ++r) sum += ToFloat(dy[r * n_dim + n]);
    dbias[gn] += sum;
  }
}

unsigned TilesOf(int64_t n) { return static_cast<unsigned>((n + kTile - 1) / kTile); }

absl::Status CheckShape(DType dtype, int64_t g, int64_t m, int64_t k, int64_t n, const char* op) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(dtype, op));
  if (g < 1 || g > 65535 || m < 0 || k < 0 || n < 0 || (m + kTile - 1) / kTile + g > (int64_t{1} << 31) - 1 ||
      TilesOf(n) > 65535 || TilesOf(k) > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": bad shape G=", g, " M=", m, " K=", k, " N=", n));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status ScalarForward(const Context& ctx, const GroupedMatmulParams& p) {
  const dim3 grid(static_cast<unsigned>((p.M + kTile - 1) / kTile + p.G), TilesOf(p.N));
  RowBlockGemmKernel<T, true><<<grid, kThreads, 0, StreamOf(ctx)>>>(
      p.G, p.offsets, p.K, p.N, static_cast<const T*>(p.x), static_cast<const T*>(p.w),
      static_cast<const T*>(p.bias), static_cast<T*>(p.y));
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("GroupedMatmulKernel");
  return absl::OkStatus();
}

// dx and dw (each where asked for).
template <typename T>
absl::Status ScalarBackwardProducts(const Context& ctx, const GroupedMatmulBackwardParams& p) {
  const cudaStream_t stream = StreamOf(ctx);
  if (p.dx != nullptr) {
    const dim3 grid(static_cast<unsigned>((p.M + kTile - 1) / kTile + p.G), TilesOf(p.K));
    RowBlockGemmKernel<T, false><<<grid, kThreads, 0, stream>>>(p.G, p.offsets, p.N, p.K, static_cast<const T*>(p.dy),
                                                               static_cast<const T*>(p.w), nullptr,
                                                               static_cast<T*>(p.dx));
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("GroupedMatmulDxKernel");
  }
  if (p.dw != nullptr && p.N > 0) {
    const dim3 grid(TilesOf(p.K), TilesOf(p.N), static_cast<unsigned>(p.G));
    WeightGradKernel<T><<<grid, kThreads, 0, stream>>>(p.offsets, p.K, p.N, static_cast<const T*>(p.x),
                                                      static_cast<const T*>(p.dy), p.dw);
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("GroupedMatmulWeightGradKernel");
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status BiasGrad(const Context& ctx, const GroupedMatmulBackwardParams& p) {
  BiasGradKernel<T><<<GridFor(p.G * p.N, kThreads), kThreads, 0, StreamOf(ctx)>>>(p.G, p.offsets, p.N,
                                                                                 static_cast<const T*>(p.dy),
                                                                                 p.dbias);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("GroupedMatmulBiasGradKernel");
  return absl::OkStatus();
}

// Whether `kernel` means the tensor-core kernels for these shapes; kTensorCore where they do not fit is an
// error naming what they need.
absl::StatusOr<bool> UseTensorCores(GroupedMatmulKernel kernel, bool supported, DType dtype, int64_t k,
                                    int64_t n, const char* op) {
  if (kernel == GroupedMatmulKernel::kScalar) return false;
  if (kernel == GroupedMatmulKernel::kAuto || supported) return supported;
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": the tensor-core kernel needs bf16, K and N multiples of 8 and 16-byte aligned buffers; got ",
      DTypeName(dtype), " K=", k, " N=", n));
}

}  // namespace

absl::Status GroupedMatmulWithKernel(const Context& ctx, const GroupedMatmulParams& p,
                                     GroupedMatmulKernel kernel) {
  LMF_RETURN_IF_ERROR_STATUS(CheckShape(p.dtype, p.G, p.M, p.K, p.N, "GroupedMatmul"));
  const bool supported = grouped::MmaSupports(p.dtype, p.K, p.N, p.x, p.w, p.y, nullptr);
  absl::StatusOr<bool> mma = UseTensorCores(kernel, supported, p.dtype, p.K, p.N, "GroupedMatmul");
  if (!mma.ok()) return mma.status();
  if (p.M == 0 || p.N == 0) return absl::OkStatus();
  if (*mma) return grouped::MmaForward(ctx, p);
  return p.dtype == DType::kF32 ? ScalarForward<float>(ctx, p) : ScalarForward<bf16>(ctx, p);
}

absl::Status GroupedMatmulBackwardWithKernel(const Context& ctx, const GroupedMatmulBackwardParams& p,
                                             GroupedMatmulKernel kernel) {
  LMF_RETURN_IF_ERROR_STATUS(CheckShape(p.dtype, p.G, p.M, p.K, p.N, "GroupedMatmulBackward"));
  const bool supported = grouped::MmaSupports(p.dtype, p.K, p.N, p.x, p.w, p.dy, p.dx);
  absl::StatusOr<bool> mma = UseTensorCores(kernel, supported, p.dtype, p.K, p.N, "GroupedMatmulBackward");
  if (!mma.ok()) return mma.status();
  if (p.M == 0) return absl::OkStatus();
  if (*mma) {  // the tensor-core kernels take K, N > 0 only
    LMF_RETURN_IF_ERROR_STATUS(grouped::MmaBackwardProducts(ctx, p));
  } else if (p.K > 0) {
    LMF_RETURN_IF_ERROR_STATUS(p.dtype == DType::kF32 ? ScalarBackwardProducts<float>(ctx, p)
                                                      : ScalarBackwardProducts<bf16>(ctx, p));
  }
  if (p.dbias == nullptr || p.N == 0) return absl::OkStatus();
  return p.dtype == DType::kF32 ? BiasGrad<float>(ctx, p) : BiasGrad<bf16>(ctx, p);
}

absl::Status GroupedMatmul(const Context& ctx, const GroupedMatmulParams& p) {
  return GroupedMatmulWithKernel(ctx, p, GroupedMatmulKernel::kAuto);
}

absl::Status GroupedMatmulBackward(const Context& ctx, const GroupedMatmulBackwardParams& p) {
  return GroupedMatmulBackwardWithKernel(ctx, p, GroupedMatmulKernel::kAuto);
}

}  // namespace lmf::kernels::cuda
