// Embedding: row gather from a table, and its backward (scatter-add into the table's gradient).
//
//   forward:  out[n, :] = table[ids[n], :]                       n in [0, N)
//   backward: dtable[ids[n], :] += dout[n, :]   (parameter gradient: accumulates)
// Ids outside [0, V) abort with the offending id (the tokenizer and data loader guarantee the range). On CUDA
// that check is a kernel and a wait for the stream (the ids live on the device); a caller that has already
// checked them (the model does, on the host, before copying them) sets ids_checked and skips it: an id out of
// range then reads (forward) or writes (backward) outside the table.
#ifndef LMFORGE_KERNELS_EMBEDDING_EMBEDDING_H_
#define LMFORGE_KERNELS_EMBEDDING_EMBEDDING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

struct EmbeddingForwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0;                 // rows looked up (B * T)
  int64_t V = 0;                 // table rows
  int64_t C = 0;                 // channels
  const int32_t* ids = nullptr;  // (N)
  const void* table = nullptr;   // (V, C)
  void* out = nullptr;           // (N, C)
  bool ids_checked = false;      // every id is known to be in [0, V): no device-side check (see the top)
};

struct EmbeddingBackwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0, V = 0, C = 0;
  const int32_t* ids = nullptr;  // (N)
  const void* dout = nullptr;    // (N, C)
  void* dtable = nullptr;        // (V, C), accumulated (+=)
  bool ids_checked = false;      // every id is known to be in [0, V): no device-side check (see the top)
};

// The CUDA backend (embedding_cuda.cu, built in where LMF_WITH_CUDA): the same params on device
// pointers, run on ctx.stream; argument errors, unsupported cases and CUDA errors come back as a Status.
namespace cuda {
absl::Status EmbeddingForward(const Context& ctx, const EmbeddingForwardParams& p);
absl::Status EmbeddingBackward(const Context& ctx, const EmbeddingBackwardParams& p);
}  // namespace cuda

namespace cpu {
void EmbeddingForward(const Context& ctx, const EmbeddingForwardParams& p);
void EmbeddingBackward(const Context& ctx, const EmbeddingBackwardParams& p);
}  // namespace cpu

inline void EmbeddingForward(const Context& ctx, const EmbeddingForwardParams& p) {
  if (!BackendSupports("embedding", ctx.device, p.dtype)) UnsupportedOp("embedding", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::EmbeddingForward(ctx, p), "EmbeddingForward");
#endif
  CpuOpScope op_scope("EmbeddingForward");
  cpu::EmbeddingForward(ctx, p);
}
inline void EmbeddingBackward(const Context& ctx, const EmbeddingBackwardParams& p) {
  if (!BackendSupports("embedding", ctx.device, p.dtype)) UnsupportedOp("embedding", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::EmbeddingBackward(ctx, p), "EmbeddingBackward");
#endif
  CpuOpScope op_scope("EmbeddingBackward");
  cpu::EmbeddingBackward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_EMBEDDING_EMBEDDING_H_
