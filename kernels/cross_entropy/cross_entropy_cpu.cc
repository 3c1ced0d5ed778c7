// CPU fused cross-entropy: per row, one pass for the max, one for sum(exp(x - max)) (vec::Exp), then the
// loss. The fused forward (dlogits set) stores exp(x - max) into the gradient row during the sum pass and
// scales it afterwards (one exp per element; in place if dlogits aliases logits); the separate backward
// recomputes exp(x - lse). With a soft-cap the gradient row (fused or not) is written by that backward pass,
// which scales each entry by 1 - (x / c)^2 from the x it has just read (so in place works). Rows split over
// threads; padding columns [V, row_stride) of dlogits are zeroed.
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/cross_entropy/cross_entropy.h"

namespace lmf::kernels::cpu {
namespace {

// dlogits row = dloss * (exp(x - lse) * (1 + 2 z lse) - onehot(target)), times 1 - (x / c)^2 with a soft-cap
// c (kCap: softcap > 0); x may alias out.
template <bool kCap>
void GradientRow(const float* x, float lse, int32_t target, float dloss, float z_loss, float softcap,
                 int64_t V, int64_t stride, float* out) {
  const float k = dloss * (1.0f + 2.0f * z_loss * lse);
  const float inv = kCap ? 1.0f / softcap : 0.0f;
  const float target_scale = kCap ? 1.0f - (x[target] * inv) * (x[target] * inv) : 1.0f;
  const __m256 vk = _mm256_set1_ps(k), vlse = _mm256_set1_ps(lse), vinv = _mm256_set1_ps(inv);
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t v = 0;
  for (; v + 8 <= V; v += 8) {
    const __m256 xv = _mm256_loadu_ps(x + v);
    __m256 g = _mm256_mul_ps(vk, vec::Exp(_mm256_sub_ps(xv, vlse)));
    if constexpr (kCap) {
      const __m256 r = _mm256_mul_ps(xv, vinv);
      g = _mm256_mul_ps(g, _mm256_fnmadd_ps(r, r, one));
    }
    _mm256_storeu_ps(out + v, g);
  }
  for (; v < V; ++v) {
    const float r = x[v] * inv;
    out[v] = kCap ? k * std::exp(x[v] - lse) * (1.0f - r * r) : k * std::exp(x[v] - lse);
  }
  out[target] -= dloss * target_scale;
  if (stride > V) std::memset(out + V, 0, sizeof(float) * (stride - V));
}

void Run(const Context& ctx, const CrossEntropyParams& p, bool forward, bool gradient) {
  const int64_t stride = p.row_stride ? p.row_stride : p.V;
  LMF_CHECK_GE(stride, p.V);
  LMF_CHECK(p.softcap >= 0 && std::isfinite(p.softcap))
      << "cross_entropy: softcap=" << p.softcap << " must be finite and >= 0 (0: none)";
  const float* logits = static_cast<const float*>(p.logits);
  float* dlogits = static_cast<float*>(p.dlogits);
  if (gradient) LMF_CHECK(dlogits != nullptr) << "cross_entropy: backward without dlogits";
  if (!forward) LMF_CHECK(p.lse != nullptr) << "cross_entropy: backward needs lse from the forward";
  ParallelForItems(ctx, p.N, 12 * p.V, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* x = logits + n * stride;
      const int32_t target = p.targets[n];
      const bool ignored = target == p.ignore_index;
      LMF_CHECK(ignored || (target >= 0 && target < p.V))
          << "cross_entropy: target " << target << " at row " << n << " outside [0, " << p.V << ")";
      float* g = gradient ? dlogits + n * stride : nullptr;
      const float dloss = p.dlosses ? p.dlosses[n] : p.dloss;
      if (forward && gradient && !ignored && p.softcap == 0) {
        // Fused: exp(x - max) goes straight into the gradient row (one exp per element), then is scaled.
        const float picked = x[target];  // read before g (which may alias x) is written
        const float mx = vec::Max(x, p.V);
        const float sum = vec::ExpShiftSum(x, mx, g, p.V);
        const float lse = mx + std::log(sum);
        if (p.lse != nullptr) p.lse[n] = lse;
        if (p.losses != nullptr) p.losses[n] = lse - picked + p.z_loss * lse * lse;
        vec::Scale(dloss * (1.0f + 2.0f * p.z_loss * lse) / sum, g, p.V);
        g[target] -= dloss;
        if (stride > p.V) std::memset(g + p.V, 0, sizeof(float) * (stride - p.V));
        continue;
      }
      float lse;
      if (forward) {
        const float mx = vec::Max(x, p.V);
        lse = mx + std::log(vec::SumExpShift(x, mx, p.V));
        if (p.lse != nullptr) p.lse[n] = lse;
        if (p.losses != nullptr) p.losses[n] = ignored ? 0.0f : lse - x[target] + p.z_loss * lse * lse;
      } else {
        lse = p.lse[n];
      }
      if (!gradient) continue;
      if (ignored || !std::isfinite(lse)) {
        std::memset(g, 0, sizeof(float) * stride);
      } else {
        (p.softcap > 0 ? GradientRow<true> : GradientRow<false>)(x, lse, target, dloss, p.z_loss, p.softcap,
                                                                 p.V, stride, g);
      }
    }
  });
}

// bf16 logits and dlogits (losses, lse, dlosses fp32): Run on fp32 twins (kernels/cpu/bf16.h). Gradients
// written in place of the logits share one twin.
void RunBF16(const Context& ctx, const CrossEntropyParams& p, bool forward, bool gradient) {
  const int64_t stride = p.row_stride ? p.row_stride : p.V;
  const RowView rows = RowView::Rows(p.N, stride, stride);
  const bool in_place = gradient && p.dlogits == p.logits;
  const F32Twin logits(ctx, p.dtype, p.logits, rows, in_place ? F32Twin::Use::kAccumulate : F32Twin::Use::kInput);
  const F32Twin dlogits = in_place || !gradient ? F32Twin()
                                               : F32Twin(ctx, p.dtype, p.dlogits, rows, F32Twin::Use::kOutput);
  CrossEntropyParams f = p;
  f.dtype = DType::kF32;
  f.row_stride = stride;
  f.logits = logits.data();
  f.dlogits = in_place ? logits.data() : dlogits.data();
  Run(ctx, f, forward, gradient);
  logits.Store(ctx);
  dlogits.Store(ctx);
}

void Dispatch(const Context& ctx, const CrossEntropyParams& p, bool forward, bool gradient) {
  if (p.dtype == DType::kBF16) return RunBF16(ctx, p, forward, gradient);
  Run(ctx, p, forward, gradient);
}

}  // namespace

void CrossEntropyForward(const Context& ctx, const CrossEntropyParams& p) {
  Dispatch(ctx, p, /*forward=*/true, /*gradient=*/p.dlogits != nullptr);
}

void CrossEntropyBackward(const Context& ctx, const CrossEntropyParams& p) {
  Dispatch(ctx, p, /*forward=*/false, /*gradient=*/true);
}

}  // namespace lmf::kernels::cpu
