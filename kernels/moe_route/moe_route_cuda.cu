// The CUDA router of moe_route.h. Per-token work (noise, selection and gates, the losses' per-token terms, the
// gradient) is one thread per token running moe_route_math.h, the code the CPU reference runs. The dispatch
// plan is a stable counting sort: one block per expert counts its selections, one thread takes the prefix
// sums, then one block per expert walks the assignments in order with block-wide prefix scans, listing its
// selections in assignment order and keeping the first `capacity` (by position) or those whose rank by gate
// is below it (by score; rank = the list's entries with a larger gate or an equal gate earlier, O(selected^2)
// per expert). Sums over tokens run in one thread in token order. No atomics anywhere: bitwise deterministic.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/moe_route/moe_route.h"
#include "kernels/moe_route/moe_route_math.h"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 128;      // per-token kernels
constexpr int kScanThreads = 256;  // the dispatch plan's blocks

__global__ void GatingNoiseKernel(MoeGatingNoiseParams p, uint64_t layer_key) {
  LMF_GRID_STRIDE(at, p.N * p.E) {
    const int64_t t = at / p.E, i = at % p.E;
    const float eps = moe_route::GatingNoise(layer_key, p.first_token + t, i);
    p.eps[at] = eps;
    p.logits[at] = moe_route::AddNoise(p.logits[at], p.noise_logits[at], eps);
  }
}

__global__ void GatingNoiseBackwardKernel(MoeGatingNoiseBackwardParams p) {
  LMF_GRID_STRIDE(at, p.N * p.E) {
    p.dnoise_logits[at] = moe_route::NoiseBackward(p.dlogits[at], p.noise_logits[at], p.eps[at]);
  }
}

__global__ void RouteKernel(MoeRouteParams p) {
  LMF_GRID_STRIDE(t, p.N) {
    moe_route::RouteToken(p.spec, p.logits + t * p.spec.E, p.bias, p.experts + t * p.spec.k, p.gates + t * p.spec.k);
  }
}

// Inclusive prefix sum of v over the block (blockDim.x threads; s holds blockDim.x ints); *total gets the
// block's sum. Synchronises before returning, so s may be reused at once.
__device__ int BlockInclusiveScan(int v, int* s, int* total) {
  s[threadIdx.x] = v;
  __syncthreads();
  for (unsigned o = 1; o < blockDim.x; o <<= 1) {
    const int add = threadIdx.x >= o ? s[threadIdx.x - o] : 0;
    __syncthreads();
    s[threadIdx.x] += add;
    __syncthreads();
  }
  const int inclusive = s[threadIdx.x];
  *total = s[blockDim.x - 1];
  __syncthreads();
  return inclusive;
}

// Block e: selected[e], counts[e] = min(selected, capacity).
__global__ void CountSelectionsKernel(MoeDispatchPlanParams p) {
  __shared__ int s[kScanThreads];
  const int32_t e = static_cast<int32_t>(blockIdx.x);
  int mine = 0;
  for (int64_t a = threadIdx.x; a < p.N * p.k; a += blockDim.x) mine += p.experts[a] == e ? 1 : 0;
  int total = 0;
  BlockInclusiveScan(mine, s, &total);
  if (threadIdx.x == 0) {
    p.selected[e] = total;
    p.counts[e] = static_cast<int32_t>(total < p.capacity ? total : p.capacity);
  }
}

// One thread: offsets (E + 1) of the kept rows and, in scratch[N k ..], of each expert's selection list.
__global__ void PlanOffsetsKernel(MoeDispatchPlanParams p) {
  int32_t* list_offsets = p.scratch + p.N * p.k;
  int32_t row = 0, listed = 0;
  for (int64_t e = 0; e < p.E; ++e) {
    p.offsets[e] = row, list_offsets[e] = listed;
    row += p.counts[e], listed += p.selected[e];
  }
  p.offsets[p.E] = row, list_offsets[p.E] = listed;
}

// Block e: lists its selections in assignment order, then numbers the kept ones into rows.
__global__ void PlaceRowsKernel(MoeDispatchPlanParams p) {
  __shared__ int s[kScanThreads];
  const int32_t e = static_cast<int32_t>(blockIdx.x);
  int32_t* list = p.scratch + p.scratch[p.N * p.k + e];
  const int64_t assignments = p.N * p.k, selected = p.selected[e], capacity = p.capacity;
  int64_t base = 0;
  for (int64_t start = 0; start < assignments; start += blockDim.x) {
    const int64_t a = start + threadIdx.x;
    const int match = a < assignments && p.experts[a] == e ? 1 : 0;
    int total = 0;
    const int at = BlockInclusiveScan(match, s, &total) - match;
    if (match) list[base + at] = static_cast<int32_t>(a);
    base += total;
  }
  __syncthreads();  // the list is complete before any thread reads another's entries
  int64_t rows = 0;
  for (int64_t start = 0; start < selected; start += blockDim.x) {
    const int64_t idx = start + threadIdx.x;
    int keep = 0;
    int32_t a = -1;
    if (idx < selected) {
      a = list[idx];
      if (selected <= capacity) {
        keep = 1;
      } else if (!p.drop_by_score) {
        keep = idx < capacity ? 1 : 0;
      } else {
        const float gate = p.gates[a];
        int64_t rank = 0;
        for (int64_t j = 0; j < selected; ++j) {
          const float other = p.gates[list[j]];
          rank += (other > gate || (other == gate && j < idx)) ? 1 : 0;
        }
        keep = rank < capacity ? 1 : 0;
      }
    }
    int total = 0;
    const int at = BlockInclusiveScan(keep, s, &total) - keep;
    if (idx < selected) {
      const int32_t row = keep ? static_cast<int32_t>(p.offsets[e] + rows + at) : -1;
      p.assignment_row[a] = row;
      if (keep) p.row_assignment[row] = a;
    }
    rows += total;
  }
}

// Per token: the balancing probabilities into probs, lse^2 into sums[t].
__global__ void TokenLossTermsKernel(MoeRouterLossParams p) {
  const int64_t e = p.spec.E;
  LMF_GRID_STRIDE(t, p.S * p.L) {
    if (p.aux_loss != 0) moe_route::BalanceProbabilities(p.spec, p.logits + t * e, p.probs + t * e);
    if (p.z_loss != 0) {
      const double lse = moe_route::LogSumExp(p.logits + t * e, e);
      p.sums[t] = lse * lse;
    }
  }
}

// Per (segment s, expert i): f_si / (L k) * (sum over the segment's tokens of p_i) / L into sums[N + s E + i].
__global__ void SegmentLossTermsKernel(MoeRouterLossParams p) {
  const int64_t e = p.spec.E, k = p.spec.k, n = p.S * p.L;
  LMF_GRID_STRIDE(si, p.S * e) {
    const int64_t s = si / e, i = si % e;
    double f = 0, mean_p = 0;
    for (int64_t a = s * p.L * k; a < (s + 1) * p.L * k; ++a) f += p.experts[a] == i ? 1.0 : 0.0;
    for (int64_t t = s * p.L; t < (s + 1) * p.L; ++t) mean_p += p.probs[t * e + i];
    p.sums[n + si] = f / static_cast<double>(p.L * k) * mean_p / static_cast<double>(p.L);
  }
}

// One thread: the two losses from the terms, summed in the CPU reference's order.
__global__ void LossTotalsKernel(MoeRouterLossParams p) {
  const int64_t e = p.spec.E, n = p.S * p.L;
  double balance = 0, z = 0;
  if (p.aux_loss != 0) {
    for (int64_t s = 0; s < p.S; ++s) {
      double sum = 0;
      for (int64_t i = 0; i < e; ++i) sum += p.sums[n + s * e + i];
      balance += p.aux_loss * static_cast<double>(e) * sum;
    }
    balance /= static_cast<double>(p.S);
  }
  if (p.z_loss != 0) {
    for (int64_t t = 0; t < n; ++t) z += p.sums[t];
    z = p.z_loss * z / static_cast<double>(n);
  }
  p.losses[0] = balance, p.losses[1] = z;
}

// Per (segment s, expert i): the segment's selections of i.
__global__ void SegmentCountsKernel(MoeRouteBackwardParams p) {
  const int64_t e = p.spec.E, k = p.spec.k;
  LMF_GRID_STRIDE(si, p.S * e) {
    const int64_t s = si / e, i = si % e;
    int32_t count = 0;
    for (int64_t a = s * p.L * k; a < (s + 1) * p.L * k; ++a) count += p.experts[a] == i ? 1 : 0;
    p.segment_counts[si] = count;
  }
}

__global__ void RouteBackwardKernel(MoeRouteBackwardParams p) {
  LMF_GRID_STRIDE(t, p.S * p.L) {
    moe_route::RouterTokenBackward(p, t, p.dlogits + t * p.spec.E);
  }
}

absl::Status CheckSpec(const MoeRouterSpec& spec, const char* op) {
  if (spec.E < 1 || spec.E > kMaxRouteExperts || spec.k < 1 || spec.k > spec.E) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": E=", spec.E, " k=", spec.k, " (1 <= k <= E <= ",
                                                   kMaxRouteExperts, ")"));
  }
  if (spec.n_groups < 1 || spec.E % spec.n_groups != 0 || spec.topk_groups < 1 || spec.topk_groups > spec.n_groups) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", spec.n_groups, " groups, ", spec.topk_groups,
                                                   " kept, of ", spec.E, " experts"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MoeGatingNoise(const Context& ctx, const MoeGatingNoiseParams& p) {
  if (p.N < 0 || p.E < 1) return absl::InvalidArgumentError(absl::StrCat("MoeGatingNoise: N=", p.N, " E=", p.E));
  if (p.N == 0) return absl::OkStatus();
  GatingNoiseKernel<<<GridFor(p.N * p.E, kThreads), kThreads, 0, StreamOf(ctx)>>>(
      p, moe_route::NoiseLayerKey(p.seed, p.step, p.layer));
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("GatingNoiseKernel");
  return absl::OkStatus();
}

absl::Status MoeGatingNoiseBackward(const Context& ctx, const MoeGatingNoiseBackwardParams& p) {
  if (p.N < 0 || p.E < 1) return absl::InvalidArgumentError(absl::StrCat("MoeGatingNoiseBackward: N=", p.N, " E=", p.E));
  if (p.N == 0) return absl::OkStatus();
  GatingNoiseBackwardKernel<<<GridFor(p.N * p.E, kThreads), kThreads, 0, StreamOf(ctx)>>>(p);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("GatingNoiseBackwardKernel");
  return absl::OkStatus();
}

absl::Status MoeRoute(const Context& ctx, const MoeRouteParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckSpec(p.spec, "MoeRoute"));
  if (p.N == 0) return absl::OkStatus();
  RouteKernel<<<GridFor(p.N, kThreads), kThreads, 0, StreamOf(ctx)>>>(p);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("RouteKernel");
  return absl::OkStatus();
}

absl::Status MoeDispatchPlan(const Context& ctx, const MoeDispatchPlanParams& p) {
  if (p.N < 0 || p.k < 1 || p.E < 1 || p.E > 65535 || p.capacity < 0 || p.N * p.k > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("MoeDispatchPlan: N=", p.N, " k=", p.k, " E=", p.E,
                                                   " capacity=", p.capacity));
  }
  const cudaStream_t stream = StreamOf(ctx);
  CountSelectionsKernel<<<static_cast<unsigned>(p.E), kScanThreads, 0, stream>>>(p);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("CountSelectionsKernel");
  PlanOffsetsKernel<<<1, 1, 0, stream>>>(p);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("PlanOffsetsKernel");
  PlaceRowsKernel<<<static_cast<unsigned>(p.E), kScanThreads, 0, stream>>>(p);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("PlaceRowsKernel");
  return absl::OkStatus();
}

absl::Status MoeRouterLoss(const Context& ctx, const MoeRouterLossParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckSpec(p.spec, "MoeRouterLoss"));
  if (p.S < 1 || p.L < 1) return absl::InvalidArgumentError(absl::StrCat("MoeRouterLoss: S=", p.S, " L=", p.L));
  const cudaStream_t stream = StreamOf(ctx);
  TokenLossTermsKernel<<<GridFor(p.S * p.L, kThreads), kThreads, 0, stream>>>(p);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("TokenLossTermsKernel");
  if (p.aux_loss != 0) {
    SegmentLossTermsKernel<<<GridFor(p.S * p.spec.E, kThreads), kThreads, 0, stream>>>(p);
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("SegmentLossTermsKernel");
  }
  LossTotalsKernel<<<1, 1, 0, stream>>>(p);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("LossTotalsKernel");
  return absl::OkStatus();
}

absl::Status MoeRouteBackward(const Context& ctx, const MoeRouteBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckSpec(p.spec, "MoeRouteBackward"));
  if (p.S < 1 || p.L < 1) return absl::InvalidArgumentError(absl::StrCat("MoeRouteBackward: S=", p.S, " L=", p.L));
  const cudaStream_t stream = StreamOf(ctx);
  if (p.aux_loss != 0) {
    SegmentCountsKernel<<<GridFor(p.S * p.spec.E, kThreads), kThreads, 0, stream>>>(p);
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("SegmentCountsKernel");
  }
  RouteBackwardKernel<<<GridFor(p.S * p.L, kThreads), kThreads, 0, stream>>>(p);
  LMF_CUDA_RETURN_IF_LAUNCH_ERROR("RouteBackwardKernel");
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda
