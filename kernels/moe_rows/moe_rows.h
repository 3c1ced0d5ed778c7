// MoeRows: the row moves of a mixture of experts around its grouped expert GEMMs, on the device that holds
// the rows. A router has given each of N tokens k assignments a = token * k + j; a dispatcher (host code:
// model/layers/moe/dispatch.h) has sorted the kept ones by expert into M rows, as two index arrays:
//   row_assignment (M) int32: the assignment each row computes (its token is row_assignment[r] / k);
//   assignment_row (N * k) int32: the row of each assignment, -1 where it was dropped.
//
//   gather:           rows[r, :] = x[row_assignment[r] / k, :]
//   combine:          out[t, :] (=, or += when accumulate) sum_j gates[t, j] * rows[assignment_row[t, j], :]
//   combine backward: drows[r, :] = gates[a] * dout[a / k, :] (written, for r = assignment_row[a] >= 0);
//                     dgates[a] = dout[a / k, :] . rows[assignment_row[a], :] (written; 0 when dropped)
//   scatter-add:      dx[t, :] = base[t, :] + sum_j drows[assignment_row[t, j], :] (written; base is an
//                     fp32 (N, C) addend or null for 0: the gather's backward plus the router's dh in one pass)
//
// Shapes: N tokens, C channels, M rows (M <= N * k). x, rows, out, dout, drows, dx are (., C) row-major in
// `dtype` (f32 or bf16); gates, dgates and base are fp32; the index arrays int32. Sums run in fp32 in the
// order j = 0..k-1 per token (dgates' dot: double on the CPU, fp32 on CUDA), so every backend is
// deterministic: the combine and the scatter-add are one thread per (token, channel) over the token's own
// assignments, never atomics. Indices are the caller's invariant (a program error if out of range).
#ifndef LMFORGE_KERNELS_MOE_ROWS_MOE_ROWS_H_
#define LMFORGE_KERNELS_MOE_ROWS_MOE_ROWS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct MoeGatherParams {
  DType dtype = DType::kF32;
  int64_t M = 0, C = 0, k = 1;
  const int32_t* row_assignment = nullptr;  // (M)
  const void* x = nullptr;                  // (N, C)
  void* rows = nullptr;                     // (M, C) written
};

struct MoeCombineParams {
  DType dtype = DType::kF32;
  int64_t N = 0, k = 1, C = 0;
  const int32_t* assignment_row = nullptr;  // (N * k), -1 for a dropped assignment
  const float* gates = nullptr;             // (N * k) fp32
  const void* rows = nullptr;               // (M, C)
  void* out = nullptr;                      // (N, C)
  bool accumulate = false;                  // out += instead of out =
};

struct MoeCombineBackwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0, k = 1, C = 0;
  const int32_t* assignment_row = nullptr;  // (N * k)
  const float* gates = nullptr;             // (N * k)
  const void* rows = nullptr;               // (M, C) the combine's input
  const void* dout = nullptr;               // (N, C)
  void* drows = nullptr;                    // (M, C) written (the rows of dropped assignments: none)
  float* dgates = nullptr;                  // (N * k) fp32 written
};

struct MoeScatterAddParams {
  DType dtype = DType::kF32;
  int64_t N = 0, k = 1, C = 0;
  const int32_t* assignment_row = nullptr;  // (N * k)
  const void* drows = nullptr;              // (M, C)
  const float* base = nullptr;              // (N, C) fp32, or null for 0
  void* dx = nullptr;                       // (N, C) written
};

// The CUDA backend (moe_rows_cuda.cu, built in where LMF_WITH_CUDA): the same params on device pointers, run
// on ctx.stream; argument errors and CUDA errors come back as a Status.
namespace cuda {
absl::Status MoeGather(const Context& ctx, const MoeGatherParams& p);
absl::Status MoeCombine(const Context& ctx, const MoeCombineParams& p);
absl::Status MoeCombineBackward(const Context& ctx, const MoeCombineBackwardParams& p);
absl::Status MoeScatterAdd(const Context& ctx, const MoeScatterAddParams& p);
}  // namespace cuda

namespace cpu {
void MoeGather(const Context& ctx, const MoeGatherParams& p);
void MoeCombine(const Context& ctx, const MoeCombineParams& p);
void MoeCombineBackward(const Context& ctx, const MoeCombineBackwardParams& p);
void MoeScatterAdd(const Context& ctx, const MoeScatterAddParams& p);
}  // namespace cpu

inline void MoeGather(const Context& ctx, const MoeGatherParams& p) {
  if (!BackendSupports("moe_rows", ctx.device, p.dtype)) UnsupportedOp("moe_rows", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MoeGather(ctx, p), "MoeGather");
#endif
  CpuOpScope op_scope("MoeGather");
  cpu::MoeGather(ctx, p);
}
inline void MoeCombine(const Context& ctx, const MoeCombineParams& p) {
  if (!BackendSupports("moe_rows", ctx.device, p.dtype)) UnsupportedOp("moe_rows", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MoeCombine(ctx, p), "MoeCombine");
#endif
  CpuOpScope op_scope("MoeCombine");
  cpu::MoeCombine(ctx, p);
}
inline void MoeCombineBackward(const Context& ctx, const MoeCombineBackwardParams& p) {
  if (!BackendSupports("moe_rows", ctx.device, p.dtype)) UnsupportedOp("moe_rows", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MoeCombineBackward(ctx, p), "MoeCombineBackward");
#endif
  CpuOpScope op_scope("MoeCombineBackward");
  cpu::MoeCombineBackward(ctx, p);
}
inline void MoeScatterAdd(const Context& ctx, const MoeScatterAddParams& p) {
  if (!BackendSupports("moe_rows", ctx.device, p.dtype)) UnsupportedOp("moe_rows", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MoeScatterAdd(ctx, p), "MoeScatterAdd");
#endif
  CpuOpScope op_scope("MoeScatterAdd");
  cpu::MoeScatterAdd(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_MOE_ROWS_MOE_ROWS_H_
