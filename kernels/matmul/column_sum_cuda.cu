// Deterministic column sums; see column_sum_cuda.h.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/matmul/column_sum_cuda.h"

namespace lmf::kernels::cuda {
namespace {

// Each thread sums W adjacent columns over one chunk of rows, in row order: 16-byte loads (W = 16 /
// sizeof(T)) where the columns, strides and pointer allow, one element otherwise; the batch and row indices
// advance by one per row instead of being divided out of the flat row index.
template <typename T, int W>
__global__ void PartialColumnSumKernel(ColumnSumParams p, int64_t rows_per_chunk, float* partial) {
  const int64_t c = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * W;
  if (c >= p.cols) return;
  const int64_t total = p.batch * p.rows;
  const int64_t r0 = blockIdx.y * rows_per_chunk, r1 = min(total, r0 + rows_per_chunk);
  const T* in = static_cast<const T*>(p.in);
  int64_t b = r0 / p.rows, row = r0 - b * p.rows;
  const T* matrix = in + b * p.batch_stride + c;
  float s[W];
#pragma unroll
  for (int i = 0; i < W; ++i) s[i] = 0.0f;
#pragma unroll 4
  for (int64_t r = r0; r < r1; ++r) {
    float v[W];
    LoadN<T, W>(matrix + row * p.ld, v);
#pragma unroll
    for (int i = 0; i < W; ++i) s[i] += v[i];
    if (++row == p.rows) row = 0, matrix += p.batch_stride;
  }
#pragma unroll
  for (int i = 0; i < W; ++i) partial[blockIdx.y * p.cols + c + i] = s[i];
}

__global__ void FinishColumnSumKernel(int64_t cols, int64_t chunks, const float* partial, float scale,
                                      bool accumulate, float* out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * cols + c];
  out[c] = (accumulate ? out[c] : 0.0f) + scale * s;
}

}  // namespace

absl::Status ColumnSum(const Context& ctx, const ColumnSumParams& p) {
  if (p.dtype != DType::kF32 && p.dtype != DType::kBF16)
    return absl::InvalidArgumentError("column sum: f32 or bf16 input");
  if (p.cols == 0) return absl::OkStatus();
  const int64_t total = p.batch * p.rows;
  // Up to 512 row chunks: enough 16-byte loads in flight to fill the device for the model's bias widths
  // (768 bf16 columns are only 96 threads per row), at a partial buffer of at most 512 x cols floats.
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(total, 512));
  const int64_t per = std::max<int64_t>(1, (total + chunks - 1) / chunks);
  Scratch scratch;
  LMF_RETURN_IF_ERROR_STATUS(scratch.Allocate(ctx, sizeof(float) * chunks * p.cols));
  const int64_t w = 16 / static_cast<int64_t>(DTypeSize(p.dtype));
  const bool vec =
      p.cols % w == 0 && p.ld % w == 0 && (p.batch == 1 || p.batch_stride % w == 0) && Aligned16({p.in});
  const int64_t threads_per_row = vec ? p.cols / w : p.cols;
  const dim3 grid(static_cast<unsigned>((threads_per_row + 127) / 128), static_cast<unsigned>(chunks));
  auto* kernel = p.dtype == DType::kF32
                     ? (vec ? PartialColumnSumKernel<float, 4> : PartialColumnSumKernel<float, 1>)
                     : (vec ? PartialColumnSumKernel<bf16, 8> : PartialColumnSumKernel<bf16, 1>);
  kernel<<<grid, 128, 0, StreamOf(ctx)>>>(p, per, scratch.get<float>());
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("PartialColumnSumKernel");
  FinishColumnSumKernel<<<static_cast<unsigned>((p.cols + 255) / 256), 256, 0, StreamOf(ctx)>>>(
      p.cols, chunks, scratch.get<float>(), p.scale, p.accumulate, p.out);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("FinishColumnSumKernel");
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda
