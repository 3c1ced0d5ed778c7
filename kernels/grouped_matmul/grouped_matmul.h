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
// of the CUDA test). CUDA: one launch per product for all groups, each block finding its group and row tile
// from the offsets; the weight gradient one block per (group, tile of w) summing the group's rows in order.
// Two kernels (GroupedMatmulKernel): for bf16 with K and N multiples of 8 and 16-byte aligned buffers,
// tensor cores (mma.sync m16n8k16, 64 x 64 tiles, cp.async double-buffered); otherwise (fp32, other shapes)
// 32 x 32 shared-memory tiles with scalar FMA. Every output element is one thread's fixed-order sum:
// deterministic, no atomics. Checked on the CPU emulation only; grouped_matmul_cuda_benchmark times both on
// a GPU.
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

// The CUDA kernel of the products (y, dx, dw; dbias has one kernel): kAuto (GroupedMatmul's) is kTensorCore
// where it takes the shapes, else kScalar; kTensorCore elsewhere is InvalidArgument (checked before any
// launch). The two differ only in fp32 summation order. Tests and the benchmark name one.
enum class GroupedMatmulKernel : uint8_t { kAuto, kScalar, kTensorCore };
absl::Status GroupedMatmulWithKernel(const Context& ctx, const GroupedMatmulParams& p,
                                     GroupedMatmulKernel kernel);
absl::Status GroupedMatmulBackwardWithKernel(const Context& ctx, const GroupedMatmulBackwardParams& p,
                                             GroupedMatmulKernel kernel);
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
