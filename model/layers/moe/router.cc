// The router's selection, gates, losses and their gradients (see router.h), one token at a time on the host.
#include "model/layers/moe/router.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "base/splitmix.h"

namespace lmf::model::moe {
namespace {

// softmax(z) over e values into p.
void Softmax(const float* z, int64_t e, float* p) {
  const float max = *std::max_element(z, z + e);
  double sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += p[i] = std::exp(z[i] - max);
  for (int64_t i = 0; i < e; ++i) p[i] = static_cast<float>(p[i] / sum);
}

float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// log sum_i exp(z_i) over e values, in double.
double LogSumExp(const float* z, int64_t e) {
  const float max = *std::max_element(z, z + e);
  double sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += std::exp(static_cast<double>(z[i] - max));
  return max + std::log(sum);
}

// A token's scores before selection: softmax probabilities, sigmoid scores, or the logits themselves.
void Scores(const MoeSpec& spec, const float* z, float* s) {
  const int64_t e = spec.n_experts;
  switch (spec.router) {
    case RouterKind::kSoftmaxTopK: Softmax(z, e, s); break;
    case RouterKind::kSigmoidTopK:
      for (int64_t i = 0; i < e; ++i) s[i] = Sigmoid(z[i]);
      break;
    case RouterKind::kTopKSoftmax: std::copy(z, z + e, s); break;
  }
}

// Indices of the `k` largest of `keys` (n), best first, ties to the lower index.
void TopK(const std::vector<float>& keys, int64_t k, std::vector<int32_t>& order) {
  order.resize(keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return keys[a] > keys[b] || (keys[a] == keys[b] && a < b); });
}

// The expert probabilities of the balancing loss for one token: the full softmax, or the sigmoid scores
// normalised over the experts (kSigmoidTopK).
void BalanceProbabilities(const MoeSpec& spec, const float* z, float* p) {
  const int64_t e = spec.n_experts;
  if (spec.router != RouterKind::kSigmoidTopK) return Softmax(z, e, p);
  double sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += p[i] = Sigmoid(z[i]);
  for (int64_t i = 0; i < e; ++i) p[i] = static_cast<float>(p[i] / sum);
}

// dp (E), the gradient of BalanceProbabilities -> dz (E) added.
void BalanceProbabilitiesBackward(const MoeSpec& spec, const float* z, const float* dp, float* dz) {
  const int64_t e = spec.n_experts;
  std::vector<float> p(static_cast<size_t>(e));
  BalanceProbabilities(spec, z, p.data());
  double dot = 0;
  for (int64_t i = 0; i < e; ++i) dot += static_cast<double>(p[i]) * dp[i];
  if (spec.router != RouterKind::kSigmoidTopK) {
    for (int64_t i = 0; i < e; ++i) dz[i] += static_cast<float>(p[i] * (dp[i] - dot));
    return;
  }
  // p_i = s_i / S: ds_i = (dp_i - sum_j dp_j p_j) / S; dz_i = ds_i s_i (1 - s_i).
  double sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += Sigmoid(z[i]);
  for (int64_t i = 0; i < e; ++i) {
    const double s = Sigmoid(z[i]);
    dz[i] += static_cast<float>((dp[i] - dot) / sum * s * (1 - s));
  }
}

}  // namespace

kernels::MoeRouterSpec DeviceRouterSpec(const MoeSpec& spec) {
  kernels::MoeRouterSpec out;
  out.kind = spec.router == RouterKind::kSoftmaxTopK   ? kernels::MoeScoreKind::kSoftmaxTopK
             : spec.router == RouterKind::kTopKSoftmax ? kernels::MoeScoreKind::kTopKSoftmax
                                                       : kernels::MoeScoreKind::kSigmoidTopK;
  out.E = spec.n_experts, out.k = spec.top_k, out.normalize_gates = spec.normalize_gates;
  out.route_scale = spec.route_scale, out.n_groups = spec.n_groups, out.topk_groups = spec.topk_groups;
  return out;
}

void Route(const MoeSpec& spec, int64_t n, const float* logits, const float* bias, int32_t* experts,
           float* gates) {
  const int64_t e = spec.n_experts, k = spec.top_k, groups = spec.n_groups, group_size = e / groups;
  std::vector<float> scores(static_cast<size_t>(e)), keys(static_cast<size_t>(e)), group_keys(static_cast<size_t>(groups));
  std::vector<int32_t> order, group_order;
  for (int64_t token = 0; token < n; ++token) {
    const float* z = logits + token * e;
    Scores(spec, z, scores.data());
    for (int64_t i = 0; i < e; ++i) keys[i] = scores[i] + (bias != nullptr ? bias[i] : 0.0f);
    if (groups > 1) {
      // A group's key: the sum of its two best keys (its best for groups of one); the experts outside the
      // topk_groups best groups are not selectable.
      for (int64_t g = 0; g < groups; ++g) {
        std::vector<float> members(keys.begin() + g * group_size, keys.begin() + (g + 1) * group_size);
        std::partial_sort(members.begin(), members.begin() + std::min<int64_t>(2, group_size), members.end(),
                          std::greater<float>());
        group_keys[g] = members[0] + (group_size > 1 ? members[1] : 0.0f);
      }
      TopK(group_keys, spec.topk_groups, group_order);
      for (int64_t r = spec.topk_groups; r < groups; ++r) {
        const int64_t g = group_order[r];
        std::fill(keys.begin() + g * group_size, keys.begin() + (g + 1) * group_size,
                  -std::numeric_limits<float>::infinity());
      }
    }
    TopK(keys, k, order);
    int32_t* chosen = experts + token * k;
    float* gate = gates + token * k;
    for (int64_t j = 0; j < k; ++j) chosen[j] = order[j];
    if (spec.router == RouterKind::kTopKSoftmax) {
      std::vector<float> selected(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) selected[j] = z[chosen[j]];
      Softmax(selected.data(), k, gate);
    } else {
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += gate[j] = scores[chosen[j]];
      if (spec.normalize_gates) {
        for (int64_t j = 0; j < k; ++j) gate[j] = static_cast<float>(gate[j] / sum);
      }
    }
    for (int64_t j = 0; j < k; ++j) gate[j] = static_cast<float>(gate[j] * spec.route_scale);
  }
}

void RouteBackward(const MoeSpec& spec, int64_t n, const float* logits, const int32_t* experts,
                   const float* dgates, float* dlogits) {
  const int64_t e = spec.n_experts, k = spec.top_k;
  const double scale = spec.route_scale;
  std::vector<float> scores(static_cast<size_t>(e)), dscores(static_cast<size_t>(e));
  for (int64_t token = 0; token < n; ++token) {
    const float* z = logits + token * e;
    const int32_t* chosen = experts + token * k;
    const float* dg = dgates + token * k;
    float* dz = dlogits + token * e;
    std::fill(dz, dz + e, 0.0f);
    if (spec.router == RouterKind::kTopKSoftmax) {
      // g = scale softmax(z_chosen): dz_j = q_j (scale dg_j - sum_l q_l scale dg_l).
      std::vector<float> q(static_cast<size_t>(k)), selected(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) selected[j] = z[chosen[j]];
      Softmax(selected.data(), k, q.data());
      double dot = 0;
      for (int64_t j = 0; j < k; ++j) dot += q[j] * scale * dg[j];
      for (int64_t j = 0; j < k; ++j) dz[chosen[j]] = static_cast<float>(q[j] * (scale * dg[j] - dot));
      continue;
    }
    Scores(spec, z, scores.data());
    std::fill(dscores.begin(), dscores.end(), 0.0f);
    if (spec.normalize_gates) {
      // g_j = scale s_j / S, S the sum of the chosen scores: ds_l = scale (dg_l / S - sum_j dg_j s_j / S^2).
      double sum = 0, dot = 0;
      for (int64_t j = 0; j < k; ++j) sum += scores[chosen[j]], dot += static_cast<double>(dg[j]) * scores[chosen[j]];
      for (int64_t j = 0; j < k; ++j) dscores[chosen[j]] = static_cast<float>(scale * (dg[j] / sum - dot / (sum * sum)));
    } else {
      for (int64_t j = 0; j < k; ++j) dscores[chosen[j]] = static_cast<float>(scale * dg[j]);
    }
    if (spec.router == RouterKind::kSoftmaxTopK) {
      double dot = 0;
      for (int64_t i = 0; i < e; ++i) dot += static_cast<double>(scores[i]) * dscores[i];
      for (int64_t i = 0; i < e; ++i) dz[i] = static_cast<float>(scores[i] * (dscores[i] - dot));
    } else {
      for (int64_t i = 0; i < e; ++i) dz[i] = dscores[i] * scores[i] * (1 - scores[i]);
    }
  }
}

namespace {

// The balancing loss's segments: the whole micro-batch, or each sequence.
struct Segments {
  int64_t count, length;
};
Segments BalanceSegments(const MoeSpec& spec, int64_t b, int64_t t) {
  return spec.aux_loss_scope == BalanceScope::kSequence ? Segments{b, t} : Segments{1, b * t};
}

// Each expert's share f_i of the segment's k * length selections.
std::vector<double> SelectionShares(const MoeSpec& spec, int64_t length, const int32_t* experts) {
  std::vector<double> f(static_cast<size_t>(spec.n_experts), 0.0);
  for (int64_t a = 0; a < length * spec.top_k; ++a) f[experts[a]] += 1.0;
  for (double& share : f) share /= static_cast<double>(length * spec.top_k);
  return f;
}

}  // namespace

double BalanceLoss(const MoeSpec& spec, int64_t b, int64_t t, const float* logits, const int32_t* experts) {
  if (spec.aux_loss == 0) return 0;
  const int64_t e = spec.n_experts;
  const Segments seg = BalanceSegments(spec, b, t);
  std::vector<float> p(static_cast<size_t>(e));
  double total = 0;
  for (int64_t s = 0; s < seg.count; ++s) {
    const std::vector<double> f = SelectionShares(spec, seg.length, experts + s * seg.length * spec.top_k);
    std::vector<double> mean_p(static_cast<size_t>(e), 0.0);
    for (int64_t token = s * seg.length; token < (s + 1) * seg.length; ++token) {
      BalanceProbabilities(spec, logits + token * e, p.data());
      for (int64_t i = 0; i < e; ++i) mean_p[i] += p[i];
    }
    double sum = 0;
    for (int64_t i = 0; i < e; ++i) sum += f[i] * mean_p[i] / static_cast<double>(seg.length);
    total += spec.aux_loss * static_cast<double>(e) * sum;
  }
  return total / static_cast<double>(seg.count);
}

void BalanceLossBackward(const MoeSpec& spec, int64_t b, int64_t t, const float* logits, const int32_t* experts,
                         float* dlogits) {
  if (spec.aux_loss == 0) return;
  const int64_t e = spec.n_experts;
  const Segments seg = BalanceSegments(spec, b, t);
  std::vector<float> dp(static_cast<size_t>(e));
  for (int64_t s = 0; s < seg.count; ++s) {
    const std::vector<double> f = SelectionShares(spec, seg.length, experts + s * seg.length * spec.top_k);
    // d loss / d p_{token, i} = aux_loss E f_i / (length * segments).
    const double coefficient = spec.aux_loss * static_cast<double>(e) / static_cast<double>(seg.length * seg.count);
    for (int64_t i = 0; i < e; ++i) dp[i] = static_cast<float>(coefficient * f[i]);
    for (int64_t token = s * seg.length; token < (s + 1) * seg.length; ++token) {
      BalanceProbabilitiesBackward(spec, logits + token * e, dp.data(), dlogits + token * e);
    }
  }
}

double RouterZLoss(const MoeSpec& spec, int64_t n, const float* logits) {
  if (spec.router_z_loss == 0) return 0;
  const int64_t e = spec.n_experts;
  double total = 0;
  for (int64_t token = 0; token < n; ++token) {
    const double lse = LogSumExp(logits + token * e, e);
    total += lse * lse;
  }
  return spec.router_z_loss * total / static_cast<double>(n);
}

void RouterZLossBackward(const MoeSpec& spec, int64_t n, const float* logits, float* dlogits) {
  if (spec.router_z_loss == 0) return;
  const int64_t e = spec.n_experts;
  std::vector<float> p(static_cast<size_t>(e));
  for (int64_t token = 0; token < n; ++token) {
    const float* z = logits + token * e;
    const double lse = LogSumExp(z, e);
    Softmax(z, e, p.data());
    // d/dz_i of z_loss * lse^2 / n = z_loss * 2 lse p_i / n.
    const double coefficient = spec.router_z_loss * 2 * lse / static_cast<double>(n);
    for (int64_t i = 0; i < e; ++i) dlogits[token * e + i] += static_cast<float>(coefficient * p[i]);
  }
}

namespace {

// softplus(x) = log(1 + e^x), without overflow.
double Softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

}  // namespace

void GatingNoise(uint64_t seed, int64_t step, int64_t layer, int64_t first_token, int64_t n, int64_t e,
                 float* eps) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  constexpr double kUnit = 1.0 / 9007199254740992.0;  // 2^-53
  const uint64_t layer_key =
      SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(layer));
  for (int64_t token = 0; token < n; ++token) {
    const uint64_t key = SplitMix64(layer_key ^ static_cast<uint64_t>(first_token + token));
    for (int64_t i = 0; i < e; ++i) {
      const uint64_t counter = key + 2 * static_cast<uint64_t>(i);
      const double u1 = static_cast<double>((SplitMix64(counter) >> 11) + 1) * kUnit;  // (0, 1]
      const double u2 = static_cast<double>(SplitMix64(counter + 1) >> 11) * kUnit;    // [0, 1)
      eps[token * e + i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
    }
  }
}

void AddGatingNoise(int64_t n, int64_t e, const float* noise_logits, const float* eps, float* logits) {
  for (int64_t i = 0; i < n * e; ++i) logits[i] = static_cast<float>(logits[i] + eps[i] * Softplus(noise_logits[i]));
}

void GatingNoiseBackward(int64_t n, int64_t e, const float* noise_logits, const float* eps, const float* dlogits,
                         float* dnoise_logits) {
  for (int64_t i = 0; i < n * e; ++i) {
    dnoise_logits[i] = static_cast<float>(dlogits[i] * eps[i] / (1.0 + std::exp(-static_cast<double>(noise_logits[i]))));
  }
}

}  // namespace lmf::model::moe
