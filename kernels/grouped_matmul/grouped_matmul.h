// GroupedMatmul: G linear maps over G row blocks of one buffer in one call, the experts' GEMMs of a mixture
// of experts. Group g owns rows [offsets[g], offsets[g + 1]) and the weight block w_g = w[g N : (g + 1) N, :]:
//
//   forward:  y[r, :] = x[r, :] w_g^T + bias_g               (written for r < offsets[G])
//   backward: dx[r, :] = dy[r, :] w_g                          (written; null: not needed)
//             dw_g += sum over g's rows of dy[r, :]^T x[r, :]  (fp32, accumulated; null: not needed)
//             dbias_g += sum over g's rows of dy[r, :]          (fp32, accumulated; null: not needed)
//
// Shapes: G groups, M rows the buffers hold (offsets[G] <= M), K inputs, N outputs. x (M, K), w (G N, K),
// bias (G N), y and dy (M, N), dx (M, K), row-major in `dtype` (f32, or bf16 on CUDA: fp32 accumulation);
// dw (G N, K) and dbias (G N) fp32. offsets (G + 1) int32 live where the op runs (on the device for CUDA:
// the row blocks need never reach the host).
//
// CPU: one kernels/matmul call per non-empty group (the per-expert GEMMs this replaces on CUDA; the reference
// of the CUDA test). CUDA: one launch for all groups: 32 x 32 output tiles through shared memory (k steps of
// 32), each block finding its group and row tile from the offsets; the weight gradient one block per
// (group, 32 x 32 tile of w) summing the group's rows in order. Every output element is one thread's fixed-
// order sum: deterministic, no atomics. Not timed: the emulation cannot, and no GPU has run it.
#ifndef LMFORGE_KERNELS_GROUPED_MATMUL_GROUPED_MATMUL_H_
#define LMFORGE_KERNELS_GROUPED_MATMUL_GROUPED_MATMUL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct GroupedMatmulParams {
  DType dtype = DType::kF32;
  int64_t G = 0, M = 0, K = 0, N = 0;
  const int32_t* offsets = nullptr;  // (G + 1)
  const void* x = nullptr;           // (M, K)
  const void* w = nullptr;           // (G N, K)
  const void* bias = nullptr;        // (G N) or null
  void* y = nullptr;                 // (M, N) written
};

struct GroupedMatmulBackwardParams {
  DType dtype = DType::kF32;
  int64_t G = 0, M = 0, K = 0, N = 0;
  const int32_t* offsets = nullptr;  // (G + 1)
  const void* x = nullptr;           // (M, K) the forward's input
  const void* w = nullptr;           // (G N, K)
  const void* dy = nullptr;          // (M, N)
  void* dx = nullptr;                // (M, K) written, or null
  float* dw = nullptr;               // (G N, K) +=, or null
  float* dbias = nullptr;            // (G N) +=, or null
};

namespace cuda {
absl::Status GroupedMatmul(const Context& ctx, const GroupedMatmulParams& p);
absl::Status GroupedMatmulBackward(const Context& ctx, const GroupedMatmulBackwardParams& p);
}  // namespace cuda

namespace cpu {
void GroupedMatmul(const Context& ctx, const GroupedMatmulParams& p);
void GroupedMatmulBackward(const Context& ctx, const GroupedMatmulBackwardParams& p);
}  // namespace cpu

inline void GroupedMatmul(const Context& ctx, const GroupedMatmulParams& p) {
  if (!BackendSupports("grouped_matmul", ctx.device, p.dtype)) UnsupportedOp("grouped_matmul", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::GroupedMatmul(ctx, p), "GroupedMatmul");
#endif
  CpuOpScope op_scope("GroupedMatmul");
  cpu::GroupedMatmul(ctx, p);
}
inline void GroupedMatmulBackward(const Context& ctx, const GroupedMatmulBackwardParams& p) {
  if (!BackendSupports("grouped_matmul", ctx.device, p.dtype)) UnsupportedOp("grouped_matmul", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::GroupedMatmulBackward(ctx, p), "GroupedMatmulBackward");
#endif
  CpuOpScope op_scope("GroupedMatmulBackward");
  cpu::GroupedMatmulBackward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_GROUPED_MATMUL_GROUPED_MATMUL_H_
