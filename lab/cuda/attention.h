// CUDA FlashAttention-2 forward and backward for bf16 q/k/v (fp32 accumulation, fp32 lse), with the params
// of kernels/attention/attention.h: (b, t, h) strides so q/k/v are read in place from a fused qkv buffer,
// GQA/MQA by indexing kv head h / (NH / NKV) (no K/V copies), causal (top-left) and optional uint8 mask,
// lse (B, NH, T) saved by the forward, fully masked rows give out 0, lse -inf and zero gradients.
// Backward writes (=) dq, dk, dv; it recomputes P from the saved lse.
//
// Kernels: tensor-core mma.sync m16n8k16 (bf16 in, fp32 accumulate) through inline PTX, 4 warps per block,
// 16 query rows (forward, dq) or 16 key rows (dk/dv) per warp. Forward: 64 queries x 64 keys per step,
// online softmax in registers (exp2 with the scale folded in). Backward in two deterministic kernels (no
// atomics): dk/dv owned per key block (looping over the query heads of its group and the query blocks),
// dq owned per query block (recomputing S and dP): about 1.4x the FLOPs of FA2's atomic dq.
// Supported: dtype kBF16 with HS 64 or 128, strides and pointers 16-byte aligned (multiples of 8 elements);
// dtype kF32 with HS 32, 64 or 128, any strides (CUDA-core kernels in attention_f32.cu, for fp32 runs and
// as a check). Anything else returns InvalidArgument/Unimplemented.
#ifndef LMFORGE_LAB_CUDA_ATTENTION_H_
#define LMFORGE_LAB_CUDA_ATTENTION_H_

#include "absl/status/status.h"
#include "kernels/attention/attention.h"
#include "kernels/core/context.h"

namespace lmf::kernels::cuda {

absl::Status AttentionForward(const Context& ctx, const AttentionParams& p);

// Lab variants of the bf16 forward being compared (tests require bitwise-equal outputs; the benchmark times
// both): kPackedV (AttentionForward's) builds V's B fragments from 16-bit shared loads, kLdmatrixV with
// ldmatrix.trans. The faster one, once both pass on a GPU, becomes AttentionForward's.
enum class AttentionForwardVariant : uint8_t { kPackedV, kLdmatrixV };
absl::Status AttentionForwardWithVariant(const Context& ctx, const AttentionParams& p,
                                         AttentionForwardVariant v);
absl::Status AttentionBackward(const Context& ctx, const AttentionBackwardParams& p);

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_LAB_CUDA_ATTENTION_H_
