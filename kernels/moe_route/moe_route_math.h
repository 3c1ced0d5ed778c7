// The per-token arithmetic of moe_route.h, written once for the CPU reference (moe_route_cpu.cc) and the CUDA
// kernels (moe_route_cuda.cu): each function is one token's (or one element's) serial code, rounding where
// model/layers/moe/router.cc rounds (fp32 scores and gates, double sums), so that both backends and the host
// router select the same experts. Internal to kernels/moe_route.
#ifndef LMFORGE_KERNELS_MOE_ROUTE_MOE_ROUTE_MATH_H_
#define LMFORGE_KERNELS_MOE_ROUTE_MOE_ROUTE_MATH_H_

#include <math.h>

#include <cstdint>

#include "base/host_device.h"
#include "base/splitmix.h"
#include "kernels/moe_route/moe_route.h"

namespace lmf::kernels::moe_route {

constexpr int kMaxE = static_cast<int>(kMaxRouteExperts);

// softmax(z) over e values into p (fp32 exponentials, a double sum).
LMF_HOST_DEVICE inline void Softmax(const float* z, int64_t e, float* p) {
  float max = z[0];
  for (int64_t i = 1; i < e; ++i) max = z[i] > max ? z[i] : max;
  double sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += p[i] = expf(z[i] - max);
  for (int64_t i = 0; i < e; ++i) p[i] = static_cast<float>(p[i] / sum);
}

LMF_HOST_DEVICE inline float Sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// log sum_i exp(z_i) in double.
LMF_HOST_DEVICE inline double LogSumExp(const float* z, int64_t e) {
  float max = z[0];
  for (int64_t i = 1; i < e; ++i) max = z[i] > max ? z[i] : max;
  double sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += exp(static_cast<double>(z[i] - max));
  return max + log(sum);
}

// The selection scores s (E) of one token's logits.
LMF_HOST_DEVICE inline void Scores(const MoeRouterSpec& spec, const float* z, float* s) {
  if (spec.kind == MoeScoreKind::kSoftmaxTopK) return Softmax(z, spec.E, s);
  for (int64_t i = 0; i < spec.E; ++i) s[i] = spec.kind == MoeScoreKind::kSigmoidTopK ? Sigmoid(z[i]) : z[i];
}

// The largest of keys (n) not yet taken, ties to the lower index; marks it taken.
LMF_HOST_DEVICE inline int TakeBest(const float* keys, int64_t n, bool* taken) {
  int best = -1;
  for (int i = 0; i < n; ++i) {
    if (!taken[i] && (best < 0 || keys[i] > keys[best])) best = i;
  }
  taken[best] = true;
  return best;
}

// One token: logits z (E), bias (E) or null -> chosen (k) best first, gate (k).
LMF_HOST_DEVICE inline void RouteToken(const MoeRouterSpec& spec, const float* z, const float* bias, int32_t* chosen,
                                       float* gate) {
  const int64_t e = spec.E, k = spec.k, groups = spec.n_groups, group_size = e / groups;
  float scores[kMaxE], keys[kMaxE];
  bool taken[kMaxE];
  Scores(spec, z, scores);
  for (int64_t i = 0; i < e; ++i) keys[i] = scores[i] + (bias != nullptr ? bias[i] : 0.0f);
  if (groups > 1) {  // a group's key: its two best keys summed; experts outside the best groups get -inf
    float group_keys[kMaxE];
    for (int64_t g = 0; g < groups; ++g) {
      float best = -INFINITY, second = -INFINITY;
      for (int64_t i = g * group_size; i < (g + 1) * group_size; ++i) {
        if (keys[i] > best) {
          second = best, best = keys[i];
        } else if (keys[i] > second) {
          second = keys[i];
        }
      }
      group_keys[g] = best + (group_size > 1 ? second : 0.0f);
      taken[g] = false;
    }
    for (int64_t r = 0; r < spec.topk_groups; ++r) TakeBest(group_keys, groups, taken);
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t i = g * group_size; i < (g + 1) * group_size && !taken[g]; ++i) keys[i] = -INFINITY;
    }
  }
  for (int64_t i = 0; i < e; ++i) taken[i] = false;
  for (int64_t j = 0; j < k; ++j) chosen[j] = TakeBest(keys, e, taken);
  if (spec.kind == MoeScoreKind::kTopKSoftmax) {
    float selected[kMaxE];
    for (int64_t j = 0; j < k; ++j) selected[j] = z[chosen[j]];
    Softmax(selected, k, gate);
  } else {
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += gate[j] = scores[chosen[j]];
    if (spec.normalize_gates) {
      for (int64_t j = 0; j < k; ++j) gate[j] = static_cast<float>(gate[j] / sum);
    }
  }
  for (int64_t j = 0; j < k; ++j) gate[j] = static_cast<float>(gate[j] * spec.route_scale);
}

// The balancing loss's probabilities p (E) of one token: softmax, or sigmoid normalised over E.
LMF_HOST_DEVICE inline void BalanceProbabilities(const MoeRouterSpec& spec, const float* z, float* p) {
  if (spec.kind != MoeScoreKind::kSigmoidTopK) return Softmax(z, spec.E, p);
  double sum = 0;
  for (int64_t i = 0; i < spec.E; ++i) sum += p[i] = Sigmoid(z[i]);
  for (int64_t i = 0; i < spec.E; ++i) p[i] = static_cast<float>(p[i] / sum);
}

// The gates' gradient dg (k) of one token -> dz (E) written.
LMF_HOST_DEVICE inline void RouteTokenBackward(const MoeRouterSpec& spec, const float* z, const int32_t* chosen,
                                               const float* dg, float* dz) {
  const int64_t e = spec.E, k = spec.k;
  const double scale = spec.route_scale;
  for (int64_t i = 0; i < e; ++i) dz[i] = 0.0f;
  if (spec.kind == MoeScoreKind::kTopKSoftmax) {  // dz_j = q_j (scale dg_j - sum_l q_l scale dg_l)
    float q[kMaxE], selected[kMaxE];
    for (int64_t j = 0; j < k; ++j) selected[j] = z[chosen[j]];
    Softmax(selected, k, q);
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += q[j] * scale * dg[j];
    for (int64_t j = 0; j < k; ++j) dz[chosen[j]] = static_cast<float>(q[j] * (scale * dg[j] - dot));
    return;
  }
  float scores[kMaxE], dscores[kMaxE];
  Scores(spec, z, scores);
  for (int64_t i = 0; i < e; ++i) dscores[i] = 0.0f;
  if (spec.normalize_gates) {  // g_j = scale s_j / S: ds_l = scale (dg_l / S - sum_j dg_j s_j / S^2)
    double sum = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) sum += scores[chosen[j]], dot += static_cast<double>(dg[j]) * scores[chosen[j]];
    for (int64_t j = 0; j < k; ++j) {
      dscores[chosen[j]] = static_cast<float>(scale * (dg[j] / sum - dot / (sum * sum)));
    }
  } else {
    for (int64_t j = 0; j < k; ++j) dscores[chosen[j]] = static_cast<float>(scale * dg[j]);
  }
  if (spec.kind == MoeScoreKind::kSoftmaxTopK) {
    double dot = 0;
    for (int64_t i = 0; i < e; ++i) dot += static_cast<double>(scores[i]) * dscores[i];
    for (int64_t i = 0; i < e; ++i) dz[i] = static_cast<float>(scores[i] * (dscores[i] - dot));
  } else {
    for (int64_t i = 0; i < e; ++i) dz[i] = dscores[i] * scores[i] * (1 - scores[i]);
  }
}

// dz (E) += the balancing loss's gradient through one token's probabilities, dp (E) = d loss / d p.
LMF_HOST_DEVICE inline void BalanceTokenBackward(const MoeRouterSpec& spec, const float* z, const float* dp,
                                                 float* dz) {
  const int64_t e = spec.E;
  float p[kMaxE];
  BalanceProbabilities(spec, z, p);
  double dot = 0;
  for (int64_t i = 0; i < e; ++i) dot += static_cast<double>(p[i]) * dp[i];
  if (spec.kind != MoeScoreKind::kSigmoidTopK) {
    for (int64_t i = 0; i < e; ++i) dz[i] += static_cast<float>(p[i] * (dp[i] - dot));
    return;
  }
  double sum = 0;  // p_i = s_i / S: dz_i = (dp_i - dot) / S s_i (1 - s_i)
  for (int64_t i = 0; i < e; ++i) sum += Sigmoid(z[i]);
  for (int64_t i = 0; i < e; ++i) {
    const double s = Sigmoid(z[i]);
    dz[i] += static_cast<float>((dp[i] - dot) / sum * s * (1 - s));
  }
}

// dz (E) += the z-loss's gradient z_loss 2 lse p_i / N for one token.
LMF_HOST_DEVICE inline void ZLossTokenBackward(int64_t e, double z_loss, int64_t n, const float* z, float* dz) {
  float p[kMaxE];
  const double lse = LogSumExp(z, e);
  Softmax(z, e, p);
  const double coefficient = z_loss * 2 * lse / static_cast<double>(n);
  for (int64_t i = 0; i < e; ++i) dz[i] += static_cast<float>(coefficient * p[i]);
}

// The whole router gradient of one token (t of segment t / L): the gates', the balancing loss's (from the
// segment's selection counts, S E) and the z-loss's, dz (E) written.
LMF_HOST_DEVICE inline void RouterTokenBackward(const MoeRouteBackwardParams& p, int64_t t, float* dz) {
  const MoeRouterSpec& spec = p.spec;
  const int64_t e = spec.E;
  const float* z = p.logits + t * e;
  RouteTokenBackward(spec, z, p.experts + t * spec.k, p.dgates + t * spec.k, dz);
  if (p.aux_loss != 0) {  // d loss / d p_{t, i} = aux_loss E f_si / (L S)
    const double coefficient = p.aux_loss * static_cast<double>(e) / static_cast<double>(p.L * p.S);
    const int32_t* counts = p.segment_counts + (t / p.L) * e;
    float dp[kMaxE];
    for (int64_t i = 0; i < e; ++i) {
      const double f = counts[i] / static_cast<double>(p.L * spec.k);
      dp[i] = static_cast<float>(coefficient * f);
    }
    BalanceTokenBackward(spec, z, dp, dz);
  }
  if (p.z_loss != 0) ZLossTokenBackward(e, p.z_loss, p.S * p.L, z, dz);
}

// The standard normal eps of token `token` (its index among the step's) and expert i, under layer_key =
// SplitMix64(SplitMix64(SplitMix64(seed) ^ step) ^ layer).
LMF_HOST_DEVICE inline float GatingNoise(uint64_t layer_key, int64_t token, int64_t i) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  constexpr double kUnit = 1.0 / 9007199254740992.0;  // 2^-53
  const uint64_t key = SplitMix64(layer_key ^ static_cast<uint64_t>(token));
  const uint64_t counter = key + 2 * static_cast<uint64_t>(i);
  const double u1 = static_cast<double>((SplitMix64(counter) >> 11) + 1) * kUnit;  // (0, 1]
  const double u2 = static_cast<double>(SplitMix64(counter + 1) >> 11) * kUnit;    // [0, 1)
  return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(kTwoPi * u2));
}

LMF_HOST_DEVICE inline uint64_t NoiseLayerKey(uint64_t seed, int64_t step, int64_t layer) {
  return SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(layer));
}

// softplus(x) = log(1 + e^x) without overflow.
LMF_HOST_DEVICE inline double Softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

// One element of the noisy logits and of its backward.
LMF_HOST_DEVICE inline float AddNoise(float logit, float noise_logit, float eps) {
  return static_cast<float>(logit + eps * Softplus(noise_logit));
}
LMF_HOST_DEVICE inline float NoiseBackward(float dlogit, float noise_logit, float eps) {
  return static_cast<float>(dlogit * eps / (1.0 + exp(-static_cast<double>(noise_logit))));
}

}  // namespace lmf::kernels::moe_route

#endif  // LMFORGE_KERNELS_MOE_ROUTE_MOE_ROUTE_MATH_H_
