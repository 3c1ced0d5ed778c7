// Scaled dot-product attention with grouped key/value heads (MHA, GQA and MQA in one kernel), causal
// and/or masked, forward and backward.
//
//   G = NH / NKV;  query head h reads key/value head h / G
//   s[t, u] = scale * q[b, t, h, :] . k[b, u, h/G, :]        t in [0, T) queries, u in [0, S) keys
//   s[t, u] = softcap * tanh(s[t, u] / softcap)               with logit soft-capping (softcap > 0; Gemma 2)
//   masked out when (causal and u > t) or (window > 0 and u <= t - window) or (mask and mask[b, h, t, u] ==
//   0) out[b, t, h, :] = sum_u softmax_u(s[t, :]) v[b, u, h/G, :] lse[b, h, t] = log sum_u exp(s[t, u])
//   (saved for backward)
// Causal is top-left aligned as in torch (key u is visible to query t iff u <= t), which for T == S is
// the usual lower-triangular mask; a sliding window of W (Mistral, Gemma 2's local layers) leaves query t
// the W keys (t - W, t] with causal. A query row whose keys are all masked gets out = 0 and lse = -inf
// (PyTorch would give NaN) and zero gradients.
//
// q, k, v, out are (B, T|S, heads, HS) with element strides per dimension (HS contiguous), so q, k and v
// can be read in place from a fused (B, T, 3C) projection and out written into (B, T, C). Backward writes
// (=) dq, dk, dv with the strides of q, k, v (dk/dv sum over the G query heads sharing a kv head), reading
// dout with the strides of out. Algorithms: kTiled is the online-softmax (flash) kernel that never holds
// more than a block of scores per thread; kPlain materialises each (T, S) score row block and is the
// reference. kAuto picks kTiled.
#ifndef LMFORGE_KERNELS_ATTENTION_ATTENTION_H_
#define LMFORGE_KERNELS_ATTENTION_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

enum class AttentionAlgorithm : uint8_t { kAuto, kTiled, kPlain };

struct AttentionParams {
  DType dtype = DType::kF32;
  AttentionAlgorithm algorithm = AttentionAlgorithm::kAuto;
  int64_t B = 0;
  int64_t T = 0;    // queries
  int64_t S = 0;    // keys (== T for self-attention)
  int64_t NH = 0;   // query heads
  int64_t NKV = 0;  // key/value heads; divides NH
  int64_t HS = 0;   // head size
  float scale = 0;  // usually 1 / sqrt(HS)
  bool causal = false;
  // Sliding window: query t sees no key u <= t - window (0: no window). With causal, keys (t - window, t].
  int64_t window = 0;
  // Logit soft-capping: scaled scores s become softcap * tanh(s / softcap) before the softmax (0: off).
  float softcap = 0.0f;
  const void* q = nullptr;  // (B, T, NH, HS)
  int64_t q_stride_b = 0, q_stride_t = 0, q_stride_h = 0;
  const void* k = nullptr;  // (B, S, NKV, HS)
  int64_t k_stride_b = 0, k_stride_t = 0, k_stride_h = 0;
  const void* v = nullptr;  // (B, S, NKV, HS)
  int64_t v_stride_b = 0, v_stride_t = 0, v_stride_h = 0;
  void* out = nullptr;  // (B, T, NH, HS); an input (the forward output) in backward
  int64_t out_stride_b = 0, out_stride_t = 0, out_stride_h = 0;
  float* lse = nullptr;  // (B, NH, T) contiguous; written by forward, read by backward
  // Optional mask (nonzero = attend), indexed mask[b*mask_stride_b + h*mask_stride_h + t*mask_stride_t + u];
  // a stride of 0 broadcasts over that dimension.
  const uint8_t* mask = nullptr;
  int64_t mask_stride_b = 0, mask_stride_h = 0, mask_stride_t = 0;
};

// How the CPU backward splits its work. kPerKvHead: one task per (batch, kv head) computes dq, dk and dv
// in one pass. kKeysThenQueries: one task per (batch, kv head, key block) for dk/dv, then one per (batch,
// head, query block) for dq; it recomputes the probabilities twice (~40% more arithmetic) but has work
// for every thread when batch * kv heads is small (batch 1, MQA). kAuto is kPerKvHead for now: on the shared,
// loaded 2-core machine where this was written the split schedule measured slower even for batch 1 with one
// kv head (kernels/README.md); measure on a quiet machine before making kAuto choose it.
enum class AttentionBackwardSchedule : uint8_t { kAuto, kPerKvHead, kKeysThenQueries };

struct AttentionBackwardParams {
  AttentionParams forward;     // the forward's params (q, k, v, out, lse as after the forward)
  const void* dout = nullptr;  // strided like forward.out
  void* dq = nullptr;          // strided like forward.q, written
  void* dk = nullptr;          // strided like forward.k, written
  void* dv = nullptr;          // strided like forward.v, written
  AttentionBackwardSchedule schedule = AttentionBackwardSchedule::kAuto;
};

// The CUDA backend (attention_cuda.cu and attention_f32_cuda.cu, built in where LMF_WITH_CUDA): the same
// params on device pointers, run on ctx.stream; argument errors, unsupported cases and CUDA errors come back
// as a Status.
//
// bf16: FlashAttention-2 on tensor cores (mma.sync m16n8k16, fp32 accumulation, fp32 lse), HS 64 or 128,
// strides and pointers 16-byte aligned (multiples of 8 elements). f32: CUDA-core kernels, HS 32, 64 or 128,
// any strides (for fp32 runs and as a check, not for speed). Both: NH and B at most 65535 (CUDA grid limits),
// S >= 1. Anything else returns InvalidArgument or Unimplemented. The forward runs 64 queries x 64 keys per
// step with the online softmax in registers; the backward is two deterministic kernels (no atomics): dk/dv
// per key block looping over the group's query heads, dq per query block recomputing S and dP (about 1.4x
// FA2's backward FLOPs). Tiles come in by cp.async one tile ahead of the math (FA2's order), tensor-core
// operands are read from shared memory with ldmatrix, and only tiles that cross T or S, the causal diagonal
// or a mask tensor test each score. algorithm and schedule are CPU choices and are ignored here.
namespace cuda {
absl::Status AttentionForward(const Context& ctx, const AttentionParams& p);
absl::Status AttentionBackward(const Context& ctx, const AttentionBackwardParams& p);

// Variants of the bf16 forward being compared (tests require bitwise-equal outputs; the benchmark times
// both): kPackedV (AttentionForward's) builds V's B fragments from 16-bit shared loads, kLdmatrixV with
// ldmatrix.trans (every other operand is read with ldmatrix in both). The faster one, once both pass on a
// GPU, becomes AttentionForward's and the other goes. kWgmma (attention_wgmma_cuda.cu) is the same forward on
// Hopper's warpgroup MMA (wgmma m64n64k16, operands in 128B-swizzled shared memory, P from registers; two
// warpgroups of 64 queries per block sharing the K/V tiles, FlashAttention-3's shape): sm_90a
// (compute capability 9.0) only, elsewhere an Unimplemented status; bf16 only. Not bitwise the mma.sync
// variants' (another accumulation order); checked against the CPU kernel with their tolerance. Verified only
// in the CPU emulation until a GPU run.
enum class AttentionForwardVariant : uint8_t { kPackedV, kLdmatrixV, kWgmma };
absl::Status AttentionForwardWithVariant(const Context& ctx, const AttentionParams& p,
                                         AttentionForwardVariant v);

// Variants of the bf16 backward: kMmaSync is AttentionBackward's (dsum, then the deterministic dq kernel and
// the dk/dv kernel on mma.sync). kWgmmaDkDv keeps dsum and the dq kernel (dq bitwise AttentionBackward's) and
// replaces the dk/dv kernel, which holds 4 of the backward's 7 products, by FlashAttention-3's formulation
// on wgmma (attention_wgmma_cuda.cu): per 64 keys of a kv head, S^T = K Q^T and dP^T = V dO^T with operands
// in 128B-swizzled shared memory, dV += P^T dO and dK += dS^T Q with P^T, dS^T from registers, summed over
// the group's query heads in registers (deterministic, no atomics); dk, dv written (=) as AttentionBackward
// does. kWgmma runs the whole backward on wgmma: dsum, kWgmmaDkDv's dk/dv kernel (dk, dv bitwise
// kWgmmaDkDv's) and a wgmma dq kernel for the other 3 products: per 64 queries of a query head, S = Q K^T and
// dP = dO V^T from shared memory, dQ += dS K with dS from registers and K MN-major, dQ in fp32 registers over
// the key blocks (each block owns its queries: deterministic, no atomics), written (=) as AttentionBackward
// does. With logit soft-capping both take the cap's derivative from P and the lse (S is P by then). Both:
// sm_90a (compute capability 9.0) and bf16 only, elsewhere Unimplemented (checked before any launch); not
// bitwise kMmaSync's wgmma-computed gradients (another summation order), checked against the CPU kernel with
// its tolerance; verified only in the CPU emulation until a GPU run.
enum class AttentionBackwardVariant : uint8_t { kMmaSync, kWgmmaDkDv, kWgmma };
absl::Status AttentionBackwardWithVariant(const Context& ctx, const AttentionBackwardParams& p,
                                          AttentionBackwardVariant v);
}  // namespace cuda

namespace cpu {
void AttentionForward(const Context& ctx, const AttentionParams& p);
void AttentionBackward(const Context& ctx, const AttentionBackwardParams& p);
}  // namespace cpu

inline void AttentionForward(const Context& ctx, const AttentionParams& p) {
  if (!BackendSupports("attention", ctx.device, p.dtype)) UnsupportedOp("attention", ctx, p.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::AttentionForward(ctx, p), "AttentionForward");
#endif
  CpuOpScope op_scope("AttentionForward");
  cpu::AttentionForward(ctx, p);
}
inline void AttentionBackward(const Context& ctx, const AttentionBackwardParams& p) {
  if (!BackendSupports("attention", ctx.device, p.forward.dtype))
    UnsupportedOp("attention", ctx, p.forward.dtype);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::AttentionBackward(ctx, p), "AttentionBackward");
#endif
  CpuOpScope op_scope("AttentionBackward");
  cpu::AttentionBackward(ctx, p);
}

// Whether the backends built into this binary run attention on `device` with `dtype` and head size
// `head_size`: the CPU any head size in f32; CUDA bf16 with 64 or 128, f32 with 32, 64 or 128. Model
// builders ask this before allocating, so an unsupported configuration is a clear error at build time.
bool AttentionSupported(Device device, DType dtype, int64_t head_size);

// Params for contiguous q (B, T, NH, HS), k and v (B, S, NKV, HS), out (B, T, NH, HS), scale 1/sqrt(HS).
AttentionParams ContiguousAttentionParams(int64_t B, int64_t T, int64_t S, int64_t NH, int64_t NKV,
                                          int64_t HS, bool causal, const void* q, const void* k,
                                          const void* v, void* out, float* lse);

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_ATTENTION_ATTENTION_H_
