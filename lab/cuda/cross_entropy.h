// CUDA fused softmax cross-entropy (with z-loss), fp32 and bf16 logits; same params and semantics as
// kernels/cross_entropy/cross_entropy.h: losses and lse (fp32) from the forward, dlogits written (=) in the
// logits' dtype, padding columns zeroed, ignore_index rows get loss 0 and a zero gradient.
// A target outside [0, V) that is not ignore_index gets a NaN loss (the CPU kernel aborts; a device kernel
// cannot, and NaN cannot go unnoticed in the loss). One block per row: an online logsumexp (running max and
// rescaled sum per thread, merged in a fixed tree) reads the row once; with dlogits set the same kernel then
// writes the gradient, in place when dlogits == logits. No second vocabulary-sized buffer is ever written.
#ifndef LMFORGE_LAB_CUDA_CROSS_ENTROPY_H_
#define LMFORGE_LAB_CUDA_CROSS_ENTROPY_H_

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/cross_entropy/cross_entropy.h"

namespace lmf::kernels::cuda {

absl::Status CrossEntropyForward(const Context& ctx, const CrossEntropyParams& p);
absl::Status CrossEntropyBackward(const Context& ctx, const CrossEntropyParams& p);

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_LAB_CUDA_CROSS_ENTROPY_H_
