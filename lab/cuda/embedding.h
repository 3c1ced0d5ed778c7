// CUDA embedding lookup and its deterministic backward, fp32 and bf16 (table, out, dout in dtype; dtable is
// fp32, the parameter gradient, accumulated +=). Same params as kernels/embedding/embedding.h.
// Backward: (id, row) pairs are sorted by id with a stable radix sort, then one block per distinct id sums
// its rows of dout in row order and adds the sum to dtable: no float atomics, bitwise the same every run.
// Ids outside [0, V) give InvalidArgument naming the first such row (the call synchronises the stream to
// read that flag).
#ifndef LMFORGE_LAB_CUDA_EMBEDDING_H_
#define LMFORGE_LAB_CUDA_EMBEDDING_H_

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/embedding/embedding.h"

namespace lmf::kernels::cuda {

absl::Status EmbeddingForward(const Context& ctx, const EmbeddingForwardParams& p);
absl::Status EmbeddingBackward(const Context& ctx, const EmbeddingBackwardParams& p);

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_LAB_CUDA_EMBEDDING_H_
