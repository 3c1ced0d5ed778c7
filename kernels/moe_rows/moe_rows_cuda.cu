// CUDA row moves of a mixture of experts (moe_rows.h), fp32 and bf16 storage with fp32 math. Each kernel
// walks tokens (or rows) with one block each, its threads across the C channels, so the combine and the
// scatter-add sum a token's own assignments in order j = 0..k-1 in one thread per channel: deterministic,
// no atomics. The combine backward's dgates dot is a block sum in fp32 (fixed order for a fixed block size).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/moe_rows/moe_rows.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 128;  // a multiple of 32 (BlockSum)
constexpr int64_t kMaxBlocks = 65535;

unsigned BlocksFor(int64_t items) { return static_cast<unsigned>(std::max<int64_t>(1, std::min(items, kMaxBlocks))); }

template <typename T>
__global__ void GatherKernel(int64_t m, int64_t c, int64_t k, const int32_t* row_assignment, const T* x, T* rows) {
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const T* src = x + (row_assignment[r] / k) * c;
    T* dst = rows + r * c;
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) dst[i] = src[i];
  }
}

template <typename T>
__global__ void CombineKernel(int64_t n, int64_t k, int64_t c, const int32_t* assignment_row, const float* gates,
                              const T* rows, T* out, bool accumulate) {
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
      float acc = accumulate ? ToFloat(out[t * c + i]) : 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t row = assignment_row[t * k + j];
        if (row >= 0) acc += gates[t * k + j] * ToFloat(rows[row * c + i]);
      }
      out[t * c + i] = FromFloat<T>(acc);
    }
  }
}

template <typename T>
__global__ void CombineBackwardKernel(int64_t n, int64_t k, int64_t c, const int32_t* assignment_row,
                                      const float* gates, const T* rows, const T* dout, T* drows, float* dgates) {
  __shared__ float scratch[32];
  for (int64_t a = blockIdx.x; a < n * k; a += gridDim.x) {
    const int64_t row = assignment_row[a];
    if (row < 0) {  // uniform over the block: no barrier is skipped by part of it
      if (threadIdx.x == 0) dgates[a] = 0.0f;
      continue;
    }
    const T* d = dout + (a / k) * c;
    const T* y = rows + row * c;
    T* dy = drows + row * c;
    const float gate = gates[a];
    float dot = 0.0f;
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
      const float di = ToFloat(d[i]);
      dot += di * ToFloat(y[i]);
      dy[i] = FromFloat<T>(gate * di);
    }
    dot = BlockSum(dot, scratch);
    if (threadIdx.x == 0) dgates[a] = dot;
  }
}

template <typename T>
__global__ void ScatterAddKernel(int64_t n, int64_t k, int64_t c, const int32_t* assignment_row, const T* drows,
                                 const float* base, T* dx) {
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
      float acc = base != nullptr ? base[t * c + i] : 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t row = assignment_row[t * k + j];
        if (row >= 0) acc += ToFloat(drows[row * c + i]);
      }
      dx[t * c + i] = FromFloat<T>(acc);
    }
  }
}

absl::Status CheckShape(DType dtype, int64_t n, int64_t k, int64_t c, const char* op) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(dtype, op));
  if (n < 0 || k < 1 || c < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": bad shape n=", n, " k=", k, " C=", c));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MoeGather(const Context& ctx, const MoeGatherParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckShape(p.dtype, p.M, p.k, p.C, "MoeGather"));
  if (p.M == 0 || p.C == 0) return absl::OkStatus();
  if (p.dtype == DType::kF32) {
    GatherKernel<float><<<BlocksFor(p.M), kThreads, 0, StreamOf(ctx)>>>(
        p.M, p.C, p.k, p.row_assignment, static_cast<const float*>(p.x), static_cast<float*>(p.rows));
  } else {
    GatherKernel<bf16><<<BlocksFor(p.M), kThreads, 0, StreamOf(ctx)>>>(
        p.M, p.C, p.k, p.row_assignment, static_cast<const bf16*>(p.x), static_cast<bf16*>(p.rows));
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("MoeGatherKernel");
  return absl::OkStatus();
}

absl::Status MoeCombine(const Context& ctx, const MoeCombineParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckShape(p.dtype, p.N, p.k, p.C, "MoeCombine"));
  if (p.N == 0 || p.C == 0) return absl::OkStatus();
  if (p.dtype == DType::kF32) {
    CombineKernel<float><<<BlocksFor(p.N), kThreads, 0, StreamOf(ctx)>>>(
        p.N, p.k, p.C, p.assignment_row, p.gates, static_cast<const float*>(p.rows), static_cast<float*>(p.out),
        p.accumulate);
  } else {
    CombineKernel<bf16><<<BlocksFor(p.N), kThreads, 0, StreamOf(ctx)>>>(
        p.N, p.k, p.C, p.assignment_row, p.gates, static_cast<const bf16*>(p.rows), static_cast<bf16*>(p.out),
        p.accumulate);
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("MoeCombineKernel");
  return absl::OkStatus();
}

absl::Status MoeCombineBackward(const Context& ctx, const MoeCombineBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckShape(p.dtype, p.N, p.k, p.C, "MoeCombineBackward"));
  if (p.N == 0) return absl::OkStatus();
  const unsigned grid = BlocksFor(p.N * p.k);
  if (p.dtype == DType::kF32) {
    CombineBackwardKernel<float><<<grid, kThreads, 0, StreamOf(ctx)>>>(
        p.N, p.k, p.C, p.assignment_row, p.gates, static_cast<const float*>(p.rows),
        static_cast<const float*>(p.dout), static_cast<float*>(p.drows), p.dgates);
  } else {
    CombineBackwardKernel<bf16><<<grid, kThreads, 0, StreamOf(ctx)>>>(
        p.N, p.k, p.C, p.assignment_row, p.gates, static_cast<const bf16*>(p.rows),
        static_cast<const bf16*>(p.dout), static_cast<bf16*>(p.drows), p.dgates);
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("MoeCombineBackwardKernel");
  return absl::OkStatus();
}

absl::Status MoeScatterAdd(const Context& ctx, const MoeScatterAddParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckShape(p.dtype, p.N, p.k, p.C, "MoeScatterAdd"));
  if (p.N == 0 || p.C == 0) return absl::OkStatus();
  if (p.dtype == DType::kF32) {
    ScatterAddKernel<float><<<BlocksFor(p.N), kThreads, 0, StreamOf(ctx)>>>(
        p.N, p.k, p.C, p.assignment_row, static_cast<const float*>(p.drows), p.base, static_cast<float*>(p.dx));
  } else {
    ScatterAddKernel<bf16><<<BlocksFor(p.N), kThreads, 0, StreamOf(ctx)>>>(
        p.N, p.k, p.C, p.assignment_row, static_cast<const bf16*>(p.drows), p.base, static_cast<bf16*>(p.dx));
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("MoeScatterAddKernel");
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda
