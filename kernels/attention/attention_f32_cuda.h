// fp32 attention on CUDA cores (no tensor cores), the f32 path behind cuda::AttentionForward/Backward
// (attention.h): same params and semantics, head sizes 32, 64 and 128. One warp per query row (forward, dq)
// or key row (dk/dv), 32-key or 32-query tiles in shared memory, online softmax in fp32 with expf;
// deterministic (no atomics). Meant for fp32 training runs and as a check of the bf16 kernels, not for speed.
#ifndef LMFORGE_KERNELS_ATTENTION_ATTENTION_F32_CUDA_H_
#define LMFORGE_KERNELS_ATTENTION_ATTENTION_F32_CUDA_H_

#include "absl/status/status.h"
#include "kernels/attention/attention.h"
#include "kernels/core/context.h"

namespace lmf::kernels::cuda::internal {

bool F32AttentionSupportsHeadSize(int64_t hs);
absl::Status AttentionForwardF32(const Context& ctx, const AttentionParams& p);
absl::Status AttentionBackwardF32(const Context& ctx, const AttentionBackwardParams& bp, float* dsum);

}  // namespace lmf::kernels::cuda::internal

#endif  // LMFORGE_KERNELS_ATTENTION_ATTENTION_F32_CUDA_H_
