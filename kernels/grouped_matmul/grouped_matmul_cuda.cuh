// Internal to the CUDA grouped GEMM: what its two kernel families share. grouped_matmul_cuda.cu holds the
// dispatch and the scalar kernels (any shape, fp32 or bf16); grouped_matmul_mma_cuda.cu the bf16 tensor-core
// kernels it picks when MmaSupports says the shapes fit.
#ifndef LMFORGE_KERNELS_GROUPED_MATMUL_GROUPED_MATMUL_CUDA_CUH_
#define LMFORGE_KERNELS_GROUPED_MATMUL_GROUPED_MATMUL_CUDA_CUH_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/grouped_matmul/grouped_matmul.h"

namespace lmf::kernels::cuda::grouped {

// The group and rows [*first, *end) of row tile `tile` (kRows rows; counted over every group's tiles in
// order), or false when `tile` is past the last one. *end is the group's end: the tile's rows at or past it
// belong to the next group.
template <int kRows>
__device__ __forceinline__ bool FindRowTile(const int32_t* offsets, int64_t groups, int64_t tile,
                                            int64_t* group, int64_t* first, int64_t* end) {
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t rows = offsets[g + 1] - offsets[g], tiles = (rows + kRows - 1) / kRows;
    if (tile < tiles) {
      *group = g, *first = offsets[g] + tile * kRows, *end = offsets[g + 1];
      return true;
    }
    tile -= tiles;
  }
  return false;
}

// Whether the tensor-core kernels take these shapes and buffers: bf16, K and N multiples of 8 (every row of
// every operand a whole number of 16-byte chunks) and the bf16 buffers 16-byte aligned.
bool MmaSupports(DType dtype, int64_t k, int64_t n, const void* x, const void* w, const void* y_or_dy,
                 const void* dx);

// The tensor-core forward and backward (grouped_matmul_mma_cuda.cu): the same results as the scalar kernels
// up to fp32 summation order; shapes already checked and MmaSupports true.
absl::Status MmaForward(const Context& ctx, const GroupedMatmulParams& p);
absl::Status MmaBackwardProducts(const Context& ctx, const GroupedMatmulBackwardParams& p);  // dx and dw only

}  // namespace lmf::kernels::cuda::grouped

#endif  // LMFORGE_KERNELS_GROUPED_MATMUL_GROUPED_MATMUL_CUDA_CUH_
