// Deterministic column sums of a strided, batched matrix on the GPU (the bias gradient of a GEMM):
//   out[c] (=|+=) scale * sum over batches b and rows r of in[b * batch_stride + r * ld + c]
// Rows are split into fixed chunks (at most 512) summed per column in fp32, row by row, then the chunks are
// added in order: the same bits every run, whatever the device. Each thread sums 8 bf16 / 4 f32 adjacent
// columns with 16-byte loads where cols, ld, batch_stride and the pointer allow, one column otherwise.
#ifndef LMFORGE_KERNELS_MATMUL_COLUMN_SUM_CUDA_H_
#define LMFORGE_KERNELS_MATMUL_COLUMN_SUM_CUDA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"

namespace lmf::kernels::cuda {

struct ColumnSumParams {
  DType dtype = DType::kF32;  // of `in` (kF32 or kBF16)
  int64_t rows = 0, cols = 0, ld = 0, batch = 1, batch_stride = 0;
  float scale = 1.0f;
  const void* in = nullptr;  // (batch, rows, cols), row stride ld
  float* out = nullptr;      // (cols)
  bool accumulate = true;
};

absl::Status ColumnSum(const Context& ctx, const ColumnSumParams& p);

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_MATMUL_COLUMN_SUM_CUDA_H_
