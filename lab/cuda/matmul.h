// CUDA GEMM through cuBLASLt with the MatmulParams layout of kernels/matmul/matmul.h (row-major, lda/ldb/ldc,
// transposes, strided batches, bias over N), forward and backward.
//
// dtype kF32: everything fp32, fp32 compute (no TF32: results within ~1e-5 of the CPU). dtype kBF16: a, b,
// c and bias bf16, fp32 accumulation (CUBLAS_COMPUTE_32F). Backward with kBF16: da bf16 (an activation
// gradient, written), db and dbias fp32 (parameter gradients, accumulated by default; see
// MatmulBackwardParams::accumulate_*). dbias is a fixed-order column sum (deterministic).
// Epilogues: bias (fused into the GEMM), and GELU-tanh after the bias (cuBLASLt's GELU epilogue), optionally
// saving the pre-activation (bias added) for the GELU backward.
// Needs a CudaContext for ctx.device (cuBLASLt handle and workspace).
#ifndef LMFORGE_LAB_CUDA_MATMUL_H_
#define LMFORGE_LAB_CUDA_MATMUL_H_

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/matmul/matmul.h"

namespace lmf::kernels::cuda {

enum class MatmulEpilogue : uint8_t { kNone, kGeluTanh };

struct MatmulEpilogueParams {
  MatmulEpilogue epilogue = MatmulEpilogue::kNone;
  // With kGeluTanh: where to save op(A) op(B) + bias before the GELU ((M, N), leading dimension ldc, the
  // dtype of c), or null. batch must be 1.
  void* pre_activation = nullptr;
};

absl::Status Matmul(const Context& ctx, const MatmulParams& p, const MatmulEpilogueParams& e = {});
absl::Status MatmulBackward(const Context& ctx, const MatmulBackwardParams& p);

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_LAB_CUDA_MATMUL_H_
