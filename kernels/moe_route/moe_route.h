// MoeRoute: a mixture of experts' router after its GEMM, on the device that holds the logits: gating noise,
// top-k selection and gates, the dispatch plan (assignments sorted by expert, capacity), the router losses
// and the gradient back to the logits. The CUDA backend lets a layer route with no host round-trip but one
// small copy of per-expert counts and the two loss values. model/layers/moe/router.h and dispatch.h are the
// host router these match (router_kernel_test there checks selections exactly, gates to fp32 rounding).
//
// Shapes: N tokens, E experts (E <= kMaxRouteExperts), k = top_k, S segments of L tokens (N = S L).
// logits z (N, E) fp32; experts (N, k) int32 and gates (N, k) fp32 best first; assignment a = token * k + j.
//
//   noise:    eps[t, i] = sqrt(-2 ln u1) cos(2 pi u2), u1, u2 from SplitMix64 of (seed, step, layer, t, i)
//             (router.h GatingNoise's formula); z[t, i] += eps[t, i] softplus(zn[t, i])   (in place)
//   scores:   s = softmax(z) (kSoftmaxTopK), sigmoid(z) (kSigmoidTopK), z (kTopKSoftmax)
//   select:   keys = s + bias; with G groups of E/G experts, a group's key is the sum of its two best keys,
//             experts outside the topk_groups best groups get key -inf; the k largest keys, ties to the
//             lower index
//   gates:    kTopKSoftmax: softmax of the chosen z; else the chosen s, divided by their sum when
//             normalize_gates; then every gate times route_scale
//   plan:     selected[i] = #assignments choosing expert i; counts[i] = min(selected[i], capacity) kept,
//             by position (the first ones in assignment order) or by score (the highest gates, ties to the
//             earlier assignment); offsets = exclusive prefix sum of counts; rows in expert order, within
//             an expert in assignment order: row_assignment (M) and assignment_row (N k, -1 where dropped)
//   losses:   balance = aux_loss E / S sum_s sum_i f_si P_si, f_si = (selections of i in segment s) / (L k),
//             P_si = mean over the segment's tokens of p_i (softmax(z); sigmoid(z) normalised over E for
//             kSigmoidTopK); z = z_loss / N sum_t logsumexp(z_t)^2
//   backward: dlogits = d(gates)/dz^T dgates + d(balance)/dz + d(z)/dz (written; selection has no gradient)
//
// Every output is written whole; nothing accumulates. Determinism: each token is one thread's serial
// arithmetic (fp32 as the host router rounds, double where it sums in double), counts are integer, sums
// over tokens run in token order in one thread: bitwise the same run to run, with no atomics. The CPU
// functions run the same per-token code (moe_route_math.h) on the host; on the CUDA emulation (host libm)
// the two agree bitwise, on a GPU to the last ulps of expf (selections can then differ only at exact ties).
#ifndef LMFORGE_KERNELS_MOE_ROUTE_MOE_ROUTE_H_
#define LMFORGE_KERNELS_MOE_ROUTE_MOE_ROUTE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

constexpr int64_t kMaxRouteExperts = 256;  // per-token arrays live in registers / local memory

enum class MoeScoreKind { kSoftmaxTopK, kTopKSoftmax, kSigmoidTopK };

struct MoeRouterSpec {
  MoeScoreKind kind = MoeScoreKind::kSoftmaxTopK;
  int64_t E = 0, k = 1;
  bool normalize_gates = false;
  double route_scale = 1.0;
  int64_t n_groups = 1, topk_groups = 1;  // G groups of E / G consecutive experts; 1, 1: off
};

struct MoeGatingNoiseParams {
  int64_t N = 0, E = 0;
  uint64_t seed = 0;
  int64_t step = 0, layer = 0, first_token = 0;  // the tokens are first_token .. first_token + N - 1
  const float* noise_logits = nullptr;           // (N, E) zn
  float* eps = nullptr;                          // (N, E) written
  float* logits = nullptr;                       // (N, E) += eps softplus(zn)
};

struct MoeGatingNoiseBackwardParams {
  int64_t N = 0, E = 0;
  const float* noise_logits = nullptr;  // (N, E)
  const float* eps = nullptr;           // (N, E)
  const float* dlogits = nullptr;       // (N, E) the gradient of the noisy logits
  float* dnoise_logits = nullptr;       // (N, E) written: dlogits eps sigmoid(zn)
};

struct MoeRouteParams {
  MoeRouterSpec spec;
  int64_t N = 0;
  const float* logits = nullptr;  // (N, E)
  const float* bias = nullptr;    // (E) added to the selection keys only, or null
  int32_t* experts = nullptr;     // (N, k) written
  float* gates = nullptr;         // (N, k) written
};

struct MoeDispatchPlanParams {
  int64_t N = 0, E = 0, k = 1;
  int64_t capacity = 0;         // rows an expert keeps at most (N k: dropless)
  bool drop_by_score = false;   // else by position
  const int32_t* experts = nullptr;  // (N, k)
  const float* gates = nullptr;      // (N, k)
  int32_t* selected = nullptr;       // (E) written
  int32_t* counts = nullptr;         // (E) written
  int32_t* offsets = nullptr;        // (E + 1) written; offsets[E] = M
  int32_t* row_assignment = nullptr; // (N k) written: its first M entries
  int32_t* assignment_row = nullptr; // (N k) written
  int32_t* scratch = nullptr;        // (N k + E + 1) CUDA only: each expert's selections before the capacity
};

struct MoeRouterLossParams {
  MoeRouterSpec spec;
  int64_t S = 1, L = 0;          // segments (sequences, or 1 for the micro-batch) of L tokens
  double aux_loss = 0, z_loss = 0;
  const float* logits = nullptr;   // (N, E)
  const int32_t* experts = nullptr;  // (N, k)
  double* losses = nullptr;        // (2) written: balance, z
  float* probs = nullptr;          // (N, E) scratch
  double* sums = nullptr;          // (N + S E) scratch
};

struct MoeRouteBackwardParams {
  MoeRouterSpec spec;
  int64_t S = 1, L = 0;
  double aux_loss = 0, z_loss = 0;
  const float* logits = nullptr;     // (N, E)
  const int32_t* experts = nullptr;  // (N, k)
  const float* dgates = nullptr;     // (N, k)
  float* dlogits = nullptr;          // (N, E) written
  int32_t* segment_counts = nullptr; // (S, E) scratch
};

// The CUDA backend (moe_route_cuda.cu, built in where LMF_WITH_CUDA): device pointers, ctx.stream.
namespace cuda {
absl::Status MoeGatingNoise(const Context& ctx, const MoeGatingNoiseParams& p);
absl::Status MoeGatingNoiseBackward(const Context& ctx, const MoeGatingNoiseBackwardParams& p);
absl::Status MoeRoute(const Context& ctx, const MoeRouteParams& p);
absl::Status MoeDispatchPlan(const Context& ctx, const MoeDispatchPlanParams& p);
absl::Status MoeRouterLoss(const Context& ctx, const MoeRouterLossParams& p);
absl::Status MoeRouteBackward(const Context& ctx, const MoeRouteBackwardParams& p);
}  // namespace cuda

// The CPU reference (moe_route_cpu.cc): host pointers, one thread.
namespace cpu {
void MoeGatingNoise(const Context& ctx, const MoeGatingNoiseParams& p);
void MoeGatingNoiseBackward(const Context& ctx, const MoeGatingNoiseBackwardParams& p);
void MoeRoute(const Context& ctx, const MoeRouteParams& p);
void MoeDispatchPlan(const Context& ctx, const MoeDispatchPlanParams& p);
void MoeRouterLoss(const Context& ctx, const MoeRouterLossParams& p);
void MoeRouteBackward(const Context& ctx, const MoeRouteBackwardParams& p);
}  // namespace cpu

// The entry points (the ops are fp32 / int32 whatever the model's dtype; kernels/core/dispatch.h's pattern).
inline void MoeGatingNoise(const Context& ctx, const MoeGatingNoiseParams& p) {
  if (!BackendSupports("moe_route", ctx.device, DType::kF32)) UnsupportedOp("moe_route", ctx, DType::kF32);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MoeGatingNoise(ctx, p), "MoeGatingNoise");
#endif
  CpuOpScope op_scope("MoeGatingNoise");
  cpu::MoeGatingNoise(ctx, p);
}
inline void MoeGatingNoiseBackward(const Context& ctx, const MoeGatingNoiseBackwardParams& p) {
  if (!BackendSupports("moe_route", ctx.device, DType::kF32)) UnsupportedOp("moe_route", ctx, DType::kF32);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MoeGatingNoiseBackward(ctx, p), "MoeGatingNoiseBackward");
#endif
  CpuOpScope op_scope("MoeGatingNoiseBackward");
  cpu::MoeGatingNoiseBackward(ctx, p);
}
inline void MoeRoute(const Context& ctx, const MoeRouteParams& p) {
  if (!BackendSupports("moe_route", ctx.device, DType::kF32)) UnsupportedOp("moe_route", ctx, DType::kF32);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MoeRoute(ctx, p), "MoeRoute");
#endif
  CpuOpScope op_scope("MoeRoute");
  cpu::MoeRoute(ctx, p);
}
inline void MoeDispatchPlan(const Context& ctx, const MoeDispatchPlanParams& p) {
  if (!BackendSupports("moe_route", ctx.device, DType::kF32)) UnsupportedOp("moe_route", ctx, DType::kF32);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MoeDispatchPlan(ctx, p), "MoeDispatchPlan");
#endif
  CpuOpScope op_scope("MoeDispatchPlan");
  cpu::MoeDispatchPlan(ctx, p);
}
inline void MoeRouterLoss(const Context& ctx, const MoeRouterLossParams& p) {
  if (!BackendSupports("moe_route", ctx.device, DType::kF32)) UnsupportedOp("moe_route", ctx, DType::kF32);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MoeRouterLoss(ctx, p), "MoeRouterLoss");
#endif
  CpuOpScope op_scope("MoeRouterLoss");
  cpu::MoeRouterLoss(ctx, p);
}
inline void MoeRouteBackward(const Context& ctx, const MoeRouteBackwardParams& p) {
  if (!BackendSupports("moe_route", ctx.device, DType::kF32)) UnsupportedOp("moe_route", ctx, DType::kF32);
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::MoeRouteBackward(ctx, p), "MoeRouteBackward");
#endif
  CpuOpScope op_scope("MoeRouteBackward");
  cpu::MoeRouteBackward(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_MOE_ROUTE_MOE_ROUTE_H_
