// Deterministic column sums; see column_sum_cuda.h.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/matmul/column_sum_cuda.h"

namespace lmf::kernels::cuda {
namespace {

template <typename T>
__global__ void PartialColumnSumKernel(ColumnSumParams p, int64_t rows_per_chunk, float* partial) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= p.cols) return;
  const int64_t total = p.batch * p.rows;
  const int64_t r0 = blockIdx.y * rows_per_chunk, r1 = min(total, r0 + rows_per_chunk);
  const T* in = static_cast<const T*>(p.in);
  float s = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t b = r / p.rows, row = r - b * p.rows;
    s += ToFloat(in[b * p.batch_stride + row * p.ld + c]);
  }
  partial[blockIdx.y * p.cols + c] = s;
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
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(total, 256));
  const int64_t per = std::max<int64_t>(1, (total + chunks - 1) / chunks);
  Scratch scratch;
  LMF_RETURN_IF_ERROR_STATUS(scratch.Allocate(ctx, sizeof(float) * chunks * p.cols));
  const dim3 grid(static_cast<unsigned>((p.cols + 127) / 128), static_cast<unsigned>(chunks));
  if (p.dtype == DType::kF32) {
    PartialColumnSumKernel<float><<<grid, 128, 0, StreamOf(ctx)>>>(p, per, scratch.get<float>());
  } else {
    PartialColumnSumKernel<bf16><<<grid, 128, 0, StreamOf(ctx)>>>(p, per, scratch.get<float>());
  }
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("PartialColumnSumKernel");
  FinishColumnSumKernel<<<static_cast<unsigned>((p.cols + 255) / 256), 256, 0, StreamOf(ctx)>>>(
      p.cols, chunks, scratch.get<float>(), p.scale, p.accumulate, p.out);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("FinishColumnSumKernel");
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda
