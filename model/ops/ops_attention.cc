// model/ops: RoPE and causal attention with grouped key/value heads (MHA, GQA, MQA in one code path).
// The attention keeps one row of T scores per thread (never T x T) and saves the log-sum-exp per query
// for the backward, which recomputes the probabilities. Gradients are written (=).
#include <algorithm>
#include <cmath>
#include <vector>

#include "model/ops/ops.h"
#include "model/ops/simd.h"

namespace lmf::model::ops {

void Rope(const Context& ctx, int64_t b, int64_t t, int64_t heads, int64_t hs, double theta, float* x, int64_t ld,
          bool inverse) {
  const int64_t half = hs / 2;
  std::vector<float> cos_table(static_cast<size_t>(t * half)), sin_table(static_cast<size_t>(t * half));
  for (int64_t pos = 0; pos < t; ++pos) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / hs);
      cos_table[pos * half + i] = static_cast<float>(std::cos(angle));
      sin_table[pos * half + i] = static_cast<float>(inverse ? -std::sin(angle) : std::sin(angle));
    }
  }
  ctx.pool->ParallelFor(b * t, std::max<int64_t>(1, 4096 / (heads * hs)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* cs = cos_table.data() + (r % t) * half;
      const float* sn = sin_table.data() + (r % t) * half;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + r * ld + h * hs;
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = v[2 * i], x1 = v[2 * i + 1];
          v[2 * i] = x0 * cs[i] - x1 * sn[i];
          v[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
        }
      }
    }
  });
}

void AttentionForward(const Context& ctx, const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                      const float* v, int64_t ldkv, float* out, float* lse) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hs));
  const int64_t group = s.nh / s.nkv;
  ctx.pool->RunTasks(s.b * s.nh, [&](int64_t task) {
    const int64_t bi = task / s.nh, h = task % s.nh, g = h / group;
    std::vector<float> p(static_cast<size_t>(s.t));
    for (int64_t t = 0; t < s.t; ++t) {
      const float* qt = q + (bi * s.t + t) * ldq + h * s.hs;
      for (int64_t j = 0; j <= t; ++j) p[j] = scale * simd::Dot(qt, k + (bi * s.t + j) * ldkv + g * s.hs, s.hs);
      const float mx = simd::Max(p.data(), t + 1);
      const float sum = simd::ExpShiftedSum(p.data(), mx, p.data(), t + 1);
      float* ot = out + (bi * s.t + t) * s.nh * s.hs + h * s.hs;
      std::fill(ot, ot + s.hs, 0.0f);
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j <= t; ++j) simd::Axpy(p[j] * inv, v + (bi * s.t + j) * ldkv + g * s.hs, ot, s.hs);
      lse[(bi * s.nh + h) * s.t + t] = mx + std::log(sum);
    }
  });
}

void AttentionBackward(const Context& ctx, const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                       const float* v, int64_t ldkv, const float* out, const float* lse, const float* dout,
                       float* dq, float* dk, float* dv) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hs));
  const int64_t group = s.nh / s.nkv;
  const int64_t ldo = s.nh * s.hs;
  // One task per (batch, kv head): it owns dk and dv of that head and dq of the query heads it serves.
  ctx.pool->RunTasks(s.b * s.nkv, [&](int64_t task) {
    const int64_t bi = task / s.nkv, g = task % s.nkv;
    for (int64_t j = 0; j < s.t; ++j) {
      std::fill_n(dk + (bi * s.t + j) * ldkv + g * s.hs, s.hs, 0.0f);
      std::fill_n(dv + (bi * s.t + j) * ldkv + g * s.hs, s.hs, 0.0f);
    }
    std::vector<float> p(static_cast<size_t>(s.t)), ds(static_cast<size_t>(s.t));
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      for (int64_t t = 0; t < s.t; ++t) {
        const float* qt = q + (bi * s.t + t) * ldq + h * s.hs;
        const float* dot = dout + (bi * s.t + t) * ldo + h * s.hs;
        const float* ot = out + (bi * s.t + t) * ldo + h * s.hs;
        const float row_lse = lse[(bi * s.nh + h) * s.t + t];
        const float d = simd::Dot(dot, ot, s.hs);
        for (int64_t j = 0; j <= t; ++j) {
          const float* kj = k + (bi * s.t + j) * ldkv + g * s.hs;
          const float* vj = v + (bi * s.t + j) * ldkv + g * s.hs;
          p[j] = std::exp(scale * simd::Dot(qt, kj, s.hs) - row_lse);
          ds[j] = p[j] * (simd::Dot(dot, vj, s.hs) - d) * scale;
        }
        float* dqt = dq + (bi * s.t + t) * ldq + h * s.hs;
        std::fill(dqt, dqt + s.hs, 0.0f);
        for (int64_t j = 0; j <= t; ++j) {
          const int64_t row = (bi * s.t + j) * ldkv + g * s.hs;
          simd::Axpy(ds[j], k + row, dqt, s.hs);
          simd::Axpy(ds[j], qt, dk + row, s.hs);
          simd::Axpy(p[j], dot, dv + row, s.hs);
        }
      }
    }
  });
}

}  // namespace lmf::model::ops
