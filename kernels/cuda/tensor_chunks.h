// Many tensors as one launch: the multi-tensor CUDA ops (AdamW, the gradient norm) cut every tensor into
// fixed chunks of kChunk elements, listed on the host as (tensor index, begin, end) and uploaded once per
// call with the tensors' descriptors, so one block per chunk covers all tensors, and the chunking (hence the
// reduction order of the norm) does not depend on the device. Host code for the ops' .cu files.
#ifndef LMFORGE_KERNELS_CUDA_TENSOR_CHUNKS_H_
#define LMFORGE_KERNELS_CUDA_TENSOR_CHUNKS_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/scratch.h"

namespace lmf::kernels::cuda {

// The CPU grad norm's block size: fp32 sums within a chunk, double across chunks.
inline constexpr int64_t kChunk = 16384;

struct Chunk {
  int32_t tensor;
  int64_t begin;
  int64_t end;
};

// The chunks of num spans (each with a field n, the element count), in tensor order.
template <typename Span>
std::vector<Chunk> MakeChunks(const Span* spans, int64_t num) {
  std::vector<Chunk> chunks;
  for (int64_t t = 0; t < num; ++t)
    for (int64_t b = 0; b < spans[t].n; b += kChunk)
      chunks.push_back(Chunk{static_cast<int32_t>(t), b, std::min(spans[t].n, b + kChunk)});
  return chunks;
}

// Uploads the span table and the chunk list into one scratch block (returns device pointers).
template <typename Span>
absl::Status Upload(const Context& ctx, const Span* spans, int64_t num, const std::vector<Chunk>& chunks,
                    size_t extra_bytes, Scratch& scratch, Span** d_spans, Chunk** d_chunks, void** d_extra) {
  const size_t span_bytes = (sizeof(Span) * num + 255) / 256 * 256;
  const size_t chunk_bytes = (sizeof(Chunk) * chunks.size() + 255) / 256 * 256;
  LMF_RETURN_IF_ERROR_STATUS(scratch.Allocate(ctx, span_bytes + chunk_bytes + extra_bytes));
  char* base = scratch.get<char>();
  *d_spans = reinterpret_cast<Span*>(base);
  *d_chunks = reinterpret_cast<Chunk*>(base + span_bytes);
  *d_extra = base + span_bytes + chunk_bytes;
  // From pageable host memory: the copy has read the source when the call returns.
  LMF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(*d_spans, spans, sizeof(Span) * num, cudaMemcpyHostToDevice,
                                           static_cast<cudaStream_t>(ctx.stream)));
  LMF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(*d_chunks, chunks.data(), sizeof(Chunk) * chunks.size(),
                                           cudaMemcpyHostToDevice, static_cast<cudaStream_t>(ctx.stream)));
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_CUDA_TENSOR_CHUNKS_H_
