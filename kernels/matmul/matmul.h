// Matmul: batched, strided GEMM with transposes and an optional bias, and its backward.
//
//   C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] + bias        for b in [0, batch)
//
// op(A) is (M, K): A is stored (M, K) row-major with leading dimension lda, or (K, M) when trans_a.
// op(B) is (K, N): B is stored (K, N), or (N, K) when trans_b (a Linear weight (out, in) is B with
// trans_b = true). C is (M, N) with leading dimension ldc. bias (N) is added to every row of C.
// Matrices of batch b start at a + b * batch_stride_a elements (likewise for B and C; a stride of 0
// broadcasts one matrix over the batch).
//
// Backward (MatmulBackward): given dC, writes or accumulates (per output, see accumulate_*)
//   d op(A) = dC @ op(B)^T,   d op(B) = op(A)^T @ dC,   dbias = sum over rows and batches of dC.
// Defaults follow the project rule: the activation gradient dA is written (=), the parameter gradients
// dB and dbias accumulate (+=). Each output is optional (null = not computed).
//
// The CPU GEMM is oneDNN's dnnl_sgemm (chosen by measurement, see kernels/README.md), run single-threaded
// on panels of C spread over ctx.pool (no OpenMP team of its own).
#ifndef LMFORGE_KERNELS_MATMUL_MATMUL_H_
#define LMFORGE_KERNELS_MATMUL_MATMUL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct MatmulParams {
  DType dtype = DType::kF32;
  int64_t M = 0, N = 0, K = 0;
  int64_t batch = 1;
  const void* a = nullptr;  // (M, K), or (K, M) when trans_a
  int64_t lda = 0;
  bool trans_a = false;
  int64_t batch_stride_a = 0;
  const void* b = nullptr;  // (K, N), or (N, K) when trans_b
  int64_t ldb = 0;
  bool trans_b = false;
  int64_t batch_stride_b = 0;
  void* c = nullptr;  // (M, N)
  int64_t ldc = 0;
  int64_t batch_stride_c = 0;
  const void* bias = nullptr;  // (N) or null
  float alpha = 1.0f;
  float beta = 0.0f;  // 0 overwrites C (C may be uninitialised); 1 accumulates into C
};

struct MatmulBackwardParams {
  // The forward geometry (a, b, transposes, strides, batch, M, N, K, alpha); c, bias and beta are unused.
  MatmulParams forward;
  const void* dc = nullptr;  // (M, N), leading dimension forward.ldc, batch stride forward.batch_stride_c
  void* da = nullptr;        // shaped and strided like a (lda, batch_stride_a); null = not needed
  void* db = nullptr;        // shaped and strided like b (ldb, batch_stride_b); null = not needed
  void* dbias = nullptr;     // (N); null = not needed
  bool accumulate_da = false;
  bool accumulate_db = true;
  bool accumulate_dbias = true;
};

// What runs on C after op(A) op(B) + bias, in the same call where the backend fuses it (cuBLASLt).
enum class MatmulEpilogue : uint8_t { kNone, kGeluTanh };

struct MatmulEpilogueParams {
  MatmulEpilogue epilogue = MatmulEpilogue::kNone;
  // With kGeluTanh: where to save op(A) op(B) + bias before the GELU ((M, N), leading dimension ldc, the
  // dtype of c) for the GELU backward, or null. batch must be 1.
  void* pre_activation = nullptr;
};

// The CUDA backend (matmul_cuda.cc on cuBLASLt, built in where LMF_WITH_CUDA): the same params on device
// pointers, run on ctx.stream; argument errors, unsupported cases and CUDA errors come back as a Status.
//
// dtype kF32: everything fp32, fp32 compute (no TF32: results within ~1e-5 of the CPU). dtype kBF16: a, b, c
// and bias bf16, fp32 accumulation. Backward with kBF16: da bf16 (an activation gradient, written), db and
// dbias fp32 (parameter gradients, for fp32 master weights). dbias is a fixed-order column sum
// (deterministic). Needs a CudaContext for ctx.device (kernels/cuda/cuda_context.h: cuBLASLt handle and
// workspace). Epilogues: bias (fused), and GELU-tanh after the bias, optionally saving the pre-activation:
// fused into the GEMM where cuBLASLt has an algorithm for it (and, when saving, ldc is a multiple of 8),
// else the GEMM then the GELU kernel (the CPU backend's order).
namespace cuda {
absl::Status Matmul(const Context& ctx, const MatmulParams& p, const MatmulEpilogueParams& e = {});
absl::Status MatmulBackward(const Context& ctx, const MatmulBackwardParams& p);
}  // namespace cuda

namespace cpu {
void Matmul(const Context& ctx, const MatmulParams& p, const MatmulEpilogueParams& e = {});
void MatmulBackward(const Context& ctx, const MatmulBackwardParams& p);
}  // namespace cpu

// With an epilogue (e.g. the MLP's c_fc + GELU), on every backend: the CPU applies it after its GEMM with
// the activations kernel (the same result as Matmul then ActivationForward), cuBLASLt in the same call.
inline void Matmul(const Context& ctx, const MatmulParams& p, const MatmulEpilogueParams& e = {}) {
  if (!BackendSupports("matmul", ctx.device, p.dtype)) UnsupportedOp("matmul", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::Matmul(ctx, p, e), "Matmul");
#endif
  CpuOpScope op_scope("Matmul");
  cpu::Matmul(ctx, p, e);
}
inline void MatmulBackward(const Context& ctx, const MatmulBackwardParams& p) {
  if (!BackendSupports("matmul", ctx.device, p.forward.dtype)) UnsupportedOp("matmul", ctx, p.forward.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MatmulBackward(ctx, p), "MatmulBackward");
#endif
  CpuOpScope op_scope("MatmulBackward");
  cpu::MatmulBackward(ctx, p);
}

// The params of a Linear layer, out (R, O) = x (R, I) @ w^T + bias, with w (O, I) and bias (O) or null,
// all contiguous: M = R, N = O, K = I, B = w with trans_b.
MatmulParams LinearParams(int64_t rows, int64_t in_features, int64_t out_features, const void* x,
                          const void* w, const void* bias, void* out);

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_MATMUL_MATMUL_H_
