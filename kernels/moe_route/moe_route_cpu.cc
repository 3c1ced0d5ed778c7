// The CPU reference of moe_route.h: the per-token code of moe_route_math.h over the tokens in order, and the
// dispatch plan as a plain counting sort (a different algorithm from the CUDA kernels' block scans, so the
// CUDA test compares two constructions of the same plan).
#include <algorithm>
#include <vector>

#include "base/check.h"
#include "kernels/moe_route/moe_route.h"
#include "kernels/moe_route/moe_route_math.h"

namespace lmf::kernels::cpu {
namespace {

void CheckSpec(const MoeRouterSpec& spec) {
  LMF_CHECK(spec.E >= 1 && spec.E <= kMaxRouteExperts && spec.k >= 1 && spec.k <= spec.E)
      << "moe_route: E=" << spec.E << " k=" << spec.k << " (1 <= k <= E <= " << kMaxRouteExperts << ")";
  LMF_CHECK(spec.n_groups >= 1 && spec.E % spec.n_groups == 0 && spec.topk_groups >= 1 &&
            spec.topk_groups <= spec.n_groups)
      << "moe_route: " << spec.n_groups << " groups, " << spec.topk_groups << " kept, of " << spec.E << " experts";
}

}  // namespace

void MoeGatingNoise(const Context&, const MoeGatingNoiseParams& p) {
  const uint64_t layer_key = moe_route::NoiseLayerKey(p.seed, p.step, p.layer);
  for (int64_t t = 0; t < p.N; ++t) {
    for (int64_t i = 0; i < p.E; ++i) {
      const int64_t at = t * p.E + i;
      p.eps[at] = moe_route::GatingNoise(layer_key, p.first_token + t, i);
      p.logits[at] = moe_route::AddNoise(p.logits[at], p.noise_logits[at], p.eps[at]);
    }
  }
}

void MoeGatingNoiseBackward(const Context&, const MoeGatingNoiseBackwardParams& p) {
  for (int64_t at = 0; at < p.N * p.E; ++at) {
    p.dnoise_logits[at] = moe_route::NoiseBackward(p.dlogits[at], p.noise_logits[at], p.eps[at]);
  }
}

void MoeRoute(const Context&, const MoeRouteParams& p) {
  CheckSpec(p.spec);
  for (int64_t t = 0; t < p.N; ++t) {
    moe_route::RouteToken(p.spec, p.logits + t * p.spec.E, p.bias, p.experts + t * p.spec.k, p.gates + t * p.spec.k);
  }
}

void MoeDispatchPlan(const Context&, const MoeDispatchPlanParams& p) {
  const int64_t assignments = p.N * p.k;
  std::vector<std::vector<int32_t>> chosen(static_cast<size_t>(p.E));
  for (int64_t a = 0; a < assignments; ++a) {
    LMF_CHECK(p.experts[a] >= 0 && p.experts[a] < p.E) << "moe_route: assignment " << a << " expert " << p.experts[a];
    chosen[p.experts[a]].push_back(static_cast<int32_t>(a));
  }
  std::fill(p.assignment_row, p.assignment_row + assignments, -1);
  int32_t row = 0;
  for (int64_t i = 0; i < p.E; ++i) {
    std::vector<int32_t>& kept = chosen[i];
    p.selected[i] = static_cast<int32_t>(kept.size());
    if (static_cast<int64_t>(kept.size()) > p.capacity) {
      if (p.drop_by_score) {  // the highest gates, ties to the earlier assignment, back in assignment order
        std::stable_sort(kept.begin(), kept.end(), [&](int32_t a, int32_t b) { return p.gates[a] > p.gates[b]; });
        kept.resize(static_cast<size_t>(p.capacity));
        std::sort(kept.begin(), kept.end());
      } else {
        kept.resize(static_cast<size_t>(p.capacity));
      }
    }
    p.offsets[i] = row;
    p.counts[i] = static_cast<int32_t>(kept.size());
    for (int32_t a : kept) p.row_assignment[row] = a, p.assignment_row[a] = row++;
  }
  p.offsets[p.E] = row;
}

void MoeRouterLoss(const Context&, const MoeRouterLossParams& p) {
  CheckSpec(p.spec);
  const int64_t e = p.spec.E, k = p.spec.k, n = p.S * p.L;
  double balance = 0, z = 0;
  if (p.aux_loss != 0) {
    for (int64_t s = 0; s < p.S; ++s) {
      std::vector<double> f(static_cast<size_t>(e), 0.0), mean_p(static_cast<size_t>(e), 0.0);
      for (int64_t a = s * p.L * k; a < (s + 1) * p.L * k; ++a) f[p.experts[a]] += 1.0;
      for (int64_t t = s * p.L; t < (s + 1) * p.L; ++t) {
        moe_route::BalanceProbabilities(p.spec, p.logits + t * e, p.probs + t * e);
        for (int64_t i = 0; i < e; ++i) mean_p[i] += p.probs[t * e + i];
      }
      double sum = 0;
      for (int64_t i = 0; i < e; ++i) {
        sum += f[i] / static_cast<double>(p.L * k) * mean_p[i] / static_cast<double>(p.L);
      }
      balance += p.aux_loss * static_cast<double>(e) * sum;
    }
    balance /= static_cast<double>(p.S);
  }
  if (p.z_loss != 0) {
    for (int64_t t = 0; t < n; ++t) {
      const double lse = moe_route::LogSumExp(p.logits + t * e, e);
      z += lse * lse;
    }
    z = p.z_loss * z / static_cast<double>(n);
  }
  p.losses[0] = balance, p.losses[1] = z;
}

void MoeRouteBackward(const Context&, const MoeRouteBackwardParams& p) {
  CheckSpec(p.spec);
  const int64_t e = p.spec.E, k = p.spec.k;
  std::fill(p.segment_counts, p.segment_counts + p.S * e, 0);
  for (int64_t a = 0; a < p.S * p.L * k; ++a) ++p.segment_counts[(a / (p.L * k)) * e + p.experts[a]];
  for (int64_t t = 0; t < p.S * p.L; ++t) moe_route::RouterTokenBackward(p, t, p.dlogits + t * e);
}

}  // namespace lmf::kernels::cpu
