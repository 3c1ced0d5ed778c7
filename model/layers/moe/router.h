// The router of a mixture of experts, as plain functions on the host over its fp32 logits z (N, E): which
// k experts each token takes and with which gates (MoeSpec's RouterKind, normalize_gates, route_scale,
// group-limited routing, the expert-selection bias), the gradient of the gates back to the logits, and the
// two router losses (the Switch/GShard balancing loss and the ST-MoE z-loss) with their gradients. The
// layer (moe.h) computes z with a GEMM and runs these; the dispatcher (dispatch.h) sorts the assignments.
//
// Shapes: N tokens, E experts, k = top_k. experts (N, k) int32 and gates (N, k) fp32 hold each token's
// choices best first. Gradients of logits are fp32 (N, E); RouteBackward writes them, the losses' backwards
// add to them.
#ifndef LMFORGE_MODEL_LAYERS_MOE_ROUTER_H_
#define LMFORGE_MODEL_LAYERS_MOE_ROUTER_H_

#include <cstdint>

#include "kernels/moe_route/moe_route.h"
#include "model/config/config.h"

namespace lmf::model::moe {

// The spec as the device router (kernels/moe_route, which routes exactly as these functions do) reads it.
kernels::MoeRouterSpec DeviceRouterSpec(const MoeSpec& spec);

// logits (N, E) -> experts (N, k), gates (N, k). bias (E) or null is added to the selection scores only
// (DeepSeek-V3's auxiliary-loss-free balancing); ties go to the lower expert index.
void Route(const MoeSpec& spec, int64_t n, const float* logits, const float* bias, int32_t* experts,
           float* gates);
// dgates (N, k), the gradient of the gates -> dlogits (N, E) written. The selection has no gradient.
void RouteBackward(const MoeSpec& spec, int64_t n, const float* logits, const int32_t* experts,
                   const float* dgates, float* dlogits);

// The balancing loss aux_loss * E * sum_i f_i P_i over the micro-batch of b sequences of t tokens (or the
// mean over its sequences, BalanceScope::kSequence); 0 when spec.aux_loss is 0. f counts the selections
// (before any capacity drop).
double BalanceLoss(const MoeSpec& spec, int64_t b, int64_t t, const float* logits, const int32_t* experts);
void BalanceLossBackward(const MoeSpec& spec, int64_t b, int64_t t, const float* logits, const int32_t* experts,
                         float* dlogits);
// Noisy top-k gating (MoeSpec::noisy_gating, training forwards only): eps (N, E) standard normals for the N
// tokens first_token .. first_token + N - 1 of the step (their indices among the step's tokens, the same
// under every parallel layout). Counter-based, from (seed, step, layer, token, expert) alone:
//   key = SplitMix64(SplitMix64(SplitMix64(SplitMix64(seed) ^ step) ^ layer) ^ token)
//   u1 = ((SplitMix64(key + 2i) >> 11) + 1) 2^-53,  u2 = (SplitMix64(key + 2i + 1) >> 11) 2^-53  for expert i
//   eps = sqrt(-2 ln u1) cos(2 pi u2)  (Box-Muller; tools/model/moe_reference.py draws the same)
void GatingNoise(uint64_t seed, int64_t step, int64_t layer, int64_t first_token, int64_t n, int64_t e,
                 float* eps);
// logits (N, E) += eps * softplus(noise_logits): the noisy logits H the router routes on.
void AddGatingNoise(int64_t n, int64_t e, const float* noise_logits, const float* eps, float* logits);
// dlogits (N, E), the gradient of H -> dnoise_logits (N, E) written: dlogits * eps * sigmoid(noise_logits).
void GatingNoiseBackward(int64_t n, int64_t e, const float* noise_logits, const float* eps, const float* dlogits,
                         float* dnoise_logits);

// router_z_loss * mean over the N tokens of logsumexp(z)^2; 0 when spec.router_z_loss is 0.
double RouterZLoss(const MoeSpec& spec, int64_t n, const float* logits);
void RouterZLossBackward(const MoeSpec& spec, int64_t n, const float* logits, float* dlogits);

}  // namespace lmf::model::moe

#endif  // LMFORGE_MODEL_LAYERS_MOE_ROUTER_H_
