// Fused softmax cross-entropy over the vocabulary, with an optional z-loss, forward and backward.
//
//   lse[n]    = log sum_{v < V} exp(logits[n, v])
//   losses[n] = lse[n] - logits[n, targets[n]] + z_loss * lse[n]^2      (0 where targets[n] == ignore_index)
//   dlogits[n, v] = dloss_n * (softmax[n, v] * (1 + 2 z_loss lse[n]) - [v == targets[n]])
// Only the first V columns are the vocabulary; logits rows are row_stride apart (row_stride >= V, e.g.
// 50304 for GPT-2's 50257 padded), and backward writes zeros into the padding columns.
// dloss_n = dlosses[n] if dlosses is given, else the scalar dloss (e.g. 1 / number of counted rows for a
// mean loss). The forward can also produce dlogits in the same pass (set dlogits; it may alias logits, in
// which case the logits are overwritten by their gradient): one read of the (N, V) logits instead of two.
// Backward and fused gradients are written (=).
// Final-logit soft-capping (Gemma 2): with softcap = c > 0 the logits given are already capped, y = c tanh(z
// / c) of the LM head's output z (kernels/activations' kSoftCap, e.g. in place); the losses are those of y,
// and dlogits is the gradient w.r.t. z: the one above times dy/dz = 1 - (y / c)^2, from the y it reads.
#ifndef LMFORGE_KERNELS_CROSS_ENTROPY_CROSS_ENTROPY_H_
#define LMFORGE_KERNELS_CROSS_ENTROPY_CROSS_ENTROPY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct CrossEntropyParams {
  DType dtype = DType::kF32;
  int64_t N = 0;           // rows (B * T)
  int64_t V = 0;           // vocabulary size (columns that count)
  int64_t row_stride = 0;  // elements between rows of logits / dlogits; 0 means V
  float z_loss = 0.0f;     // coefficient of lse^2 (0 = plain cross-entropy)
  float softcap = 0.0f;    // the logits are c tanh(z / c) with this c; the gradient is w.r.t. z (0 = none)
  int32_t ignore_index = -100;
  const void* logits = nullptr;      // (N, row_stride)
  const int32_t* targets = nullptr;  // (N), in [0, V) or ignore_index
  float* losses = nullptr;           // (N), written by the forward; may be null
  float* lse = nullptr;              // (N), written by the forward, read by backward
  // Gradient: read by CrossEntropyBackward; in the forward, dlogits != null makes it fused.
  const float* dlosses = nullptr;  // (N) per-row upstream gradient, or null to use `dloss`
  float dloss = 1.0f;
  void* dlogits = nullptr;  // (N, row_stride), written
};

// The CUDA backend (cross_entropy_cuda.cu, built in where LMF_WITH_CUDA): the same params on device
// pointers, run on ctx.stream; argument errors, unsupported cases and CUDA errors come back as a Status.
namespace cuda {
absl::Status CrossEntropyForward(const Context& ctx, const CrossEntropyParams& p);
absl::Status CrossEntropyBackward(const Context& ctx, const CrossEntropyParams& p);
}  // namespace cuda

namespace cpu {
void CrossEntropyForward(const Context& ctx, const CrossEntropyParams& p);
void CrossEntropyBackward(const Context& ctx, const CrossEntropyParams& p);
}  // namespace cpu

inline void CrossEntropyForward(const Context& ctx, const CrossEntropyParams& p) {
  if (!BackendSupports("cross_entropy", ctx.device, p.dtype)) UnsupportedOp("cross_entropy", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::CrossEntropyForward(ctx, p), "CrossEntropyForward");
#endif
  CpuOpScope op_scope("CrossEntropyForward");
  cpu::CrossEntropyForward(ctx, p);
}
// Needs lse from the forward.
inline void CrossEntropyBackward(const Context& ctx, const CrossEntropyParams& p) {
  if (!BackendSupports("cross_entropy", ctx.device, p.dtype)) UnsupportedOp("cross_entropy", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::CrossEntropyBackward(ctx, p), "CrossEntropyBackward");
#endif
  CpuOpScope op_scope("CrossEntropyBackward");
  cpu::CrossEntropyBackward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_CROSS_ENTROPY_CROSS_ENTROPY_H_
