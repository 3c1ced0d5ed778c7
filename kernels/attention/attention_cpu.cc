// CPU attention.
// Forward, kTiled: work items are (batch, query head, block of kQueryBlock queries); each walks the keys in
// blocks of kKeyBlock (skipping blocks entirely above the causal diagonal), keeping per query a running max,
// a running sum and an unnormalised output (online softmax), so memory per thread is one block of scores.
// Forward, kPlain: per (batch, head) the full (T, S) score matrix, softmax, then P V; the reference.
// Backward (both): per (batch, kv head) so that dk/dv of a kv head are owned by one thread; per query row
// the probabilities are recomputed from lse, one row of S at a time (no T x S buffer):
//   p = exp(s - lse), D = dout . out, ds = p (dout . v - D), dq = scale ds K, dk += scale ds q, dv += p dout.
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/attention/attention.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"

namespace lmf::kernels {

AttentionParams ContiguousAttentionParams(int64_t B, int64_t T, int64_t S, int64_t NH, int64_t NKV, int64_t HS,
                                          bool causal, const void* q, const void* k, const void* v, void* out,
                                          float* lse) {
  AttentionParams p;
  p.B = B, p.T = T, p.S = S, p.NH = NH, p.NKV = NKV, p.HS = HS;
  p.scale = 1.0f / std::sqrt(static_cast<float>(HS));
  p.causal = causal;
  p.q = q, p.q_stride_b = T * NH * HS, p.q_stride_t = NH * HS, p.q_stride_h = HS;
  p.k = k, p.k_stride_b = S * NKV * HS, p.k_stride_t = NKV * HS, p.k_stride_h = HS;
  p.v = v, p.v_stride_b = S * NKV * HS, p.v_stride_t = NKV * HS, p.v_stride_h = HS;
  p.out = out, p.out_stride_b = T * NH * HS, p.out_stride_t = NH * HS, p.out_stride_h = HS;
  p.lse = lse;
  return p;
}

namespace cpu {
namespace {

constexpr int64_t kQueryBlock = 32;
constexpr int64_t kKeyBlock = 64;

// Typed views of the params with the index arithmetic in one place.
struct View {
  const AttentionParams& p;
  int64_t group() const { return p.NH / p.NKV; }
  const float* q(int64_t b, int64_t t, int64_t h) const {
    return static_cast<const float*>(p.q) + b * p.q_stride_b + t * p.q_stride_t + h * p.q_stride_h;
  }
  const float* k(int64_t b, int64_t u, int64_t kvh) const {
    return static_cast<const float*>(p.k) + b * p.k_stride_b + u * p.k_stride_t + kvh * p.k_stride_h;
  }
  const float* v(int64_t b, int64_t u, int64_t kvh) const {
    return static_cast<const float*>(p.v) + b * p.v_stride_b + u * p.v_stride_t + kvh * p.v_stride_h;
  }
  float* out(int64_t b, int64_t t, int64_t h) const {
    return static_cast<float*>(p.out) + b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h;
  }
  float* lse(int64_t b, int64_t h, int64_t t) const { return p.lse + (b * p.NH + h) * p.T + t; }
  // Keys [0, KeyLimit(t)) may be visible to query t (the causal cut); the mask may hide more.
  int64_t KeyLimit(int64_t t) const { return p.causal ? std::min(p.S, t + 1) : p.S; }
  const uint8_t* MaskRow(int64_t b, int64_t h, int64_t t) const {
    return p.mask ? p.mask + b * p.mask_stride_b + h * p.mask_stride_h + t * p.mask_stride_t : nullptr;
  }
  // scores s[j] = scale q . k[u0 + j] for j < len, -inf where masked.
  void Scores(int64_t b, int64_t h, int64_t t, int64_t u0, int64_t len, float* s) const {
    const float* qt = q(b, t, h);
    const int64_t kvh = h / group();
    const uint8_t* mrow = MaskRow(b, h, t);
    for (int64_t j = 0; j < len; ++j) {
      s[j] = (mrow != nullptr && mrow[u0 + j] == 0) ? -INFINITY : p.scale * vec::Dot(qt, k(b, u0 + j, kvh), p.HS);
    }
  }
};

void CheckParams(const AttentionParams& p) {
  LMF_CHECK(p.B > 0 && p.T > 0 && p.S > 0 && p.NH > 0 && p.NKV > 0 && p.HS > 0)
      << "attention: B=" << p.B << " T=" << p.T << " S=" << p.S << " NH=" << p.NH << " NKV=" << p.NKV << " HS=" << p.HS;
  LMF_CHECK(p.NH % p.NKV == 0) << "attention: NKV=" << p.NKV << " does not divide NH=" << p.NH;
  LMF_CHECK(p.lse != nullptr) << "attention: lse buffer (B, NH, T) is required";
}

void ForwardTiled(const Context& ctx, const AttentionParams& p) {
  const View view{p};
  const int64_t qblocks = (p.T + kQueryBlock - 1) / kQueryBlock;
  const int64_t items = p.B * p.NH * qblocks;
  ParallelForItems(ctx, items, kQueryBlock * p.S * p.HS * 4, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(kQueryBlock * p.HS), run_max(kQueryBlock), run_sum(kQueryBlock), s(kKeyBlock);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / (p.NH * qblocks), h = (item / qblocks) % p.NH, qb = item % qblocks;
      const int64_t t0 = qb * kQueryBlock, tlen = std::min(kQueryBlock, p.T - t0);
      const int64_t kvh = h / view.group();
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(run_max.begin(), run_max.end(), -INFINITY);
      std::fill(run_sum.begin(), run_sum.end(), 0.0f);
      const int64_t key_end = view.KeyLimit(t0 + tlen - 1);
      for (int64_t u0 = 0; u0 < key_end; u0 += kKeyBlock) {
        for (int64_t i = 0; i < tlen; ++i) {
          const int64_t t = t0 + i;
          const int64_t len = std::min(kKeyBlock, view.KeyLimit(t) - u0);
          if (len <= 0) continue;
          view.Scores(b, h, t, u0, len, s.data());
          const float block_max = vec::Max(s.data(), len);
          if (block_max == -INFINITY) continue;
          const float new_max = std::max(run_max[i], block_max);
          float* a = acc.data() + i * p.HS;
          if (run_max[i] != -INFINITY && new_max != run_max[i]) {
            const float correction = std::exp(run_max[i] - new_max);
            run_sum[i] *= correction;
            vec::Scale(correction, a, p.HS);
          }
          run_max[i] = new_max;
          run_sum[i] += vec::ExpShiftSum(s.data(), new_max, s.data(), len);
          for (int64_t j = 0; j < len; ++j)
            if (s[j] != 0.0f) vec::Axpy(s[j], view.v(b, u0 + j, kvh), a, p.HS);
        }
      }
      for (int64_t i = 0; i < tlen; ++i) {
        float* o = view.out(b, t0 + i, h);
        if (run_sum[i] == 0.0f) {
          std::memset(o, 0, sizeof(float) * p.HS);
          *view.lse(b, h, t0 + i) = -INFINITY;
          continue;
        }
        const float inv = 1.0f / run_sum[i];
        const float* a = acc.data() + i * p.HS;
        for (int64_t d = 0; d < p.HS; ++d) o[d] = a[d] * inv;
        *view.lse(b, h, t0 + i) = run_max[i] + std::log(run_sum[i]);
      }
    }
  });
}

void ForwardPlain(const Context& ctx, const AttentionParams& p) {
  const View view{p};
  ParallelForItems(ctx, p.B * p.NH, p.T * p.S * p.HS * 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(p.T * p.S);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / p.NH, h = item % p.NH, kvh = h / view.group();
      for (int64_t t = 0; t < p.T; ++t) {
        float* row = scores.data() + t * p.S;
        view.Scores(b, h, t, 0, p.S, row);
        for (int64_t u = view.KeyLimit(t); u < p.S; ++u) row[u] = -INFINITY;
      }
      for (int64_t t = 0; t < p.T; ++t) {
        float* row = scores.data() + t * p.S;
        float* o = view.out(b, t, h);
        std::memset(o, 0, sizeof(float) * p.HS);
        const float mx = vec::Max(row, p.S);
        if (mx == -INFINITY) {
          *view.lse(b, h, t) = -INFINITY;
          continue;
        }
        const float sum = vec::ExpShiftSum(row, mx, row, p.S);
        *view.lse(b, h, t) = mx + std::log(sum);
        for (int64_t u = 0; u < p.S; ++u) vec::Axpy(row[u] / sum, view.v(b, u, kvh), o, p.HS);
      }
    }
  });
}

}  // namespace

void AttentionForward(const Context& ctx, const AttentionParams& p) {
  CheckParams(p);
  if (p.algorithm == AttentionAlgorithm::kPlain) {
    ForwardPlain(ctx, p);
  } else {
    ForwardTiled(ctx, p);
  }
}

void AttentionBackward(const Context& ctx, const AttentionBackwardParams& bp) {
  const AttentionParams& p = bp.forward;
  CheckParams(p);
  const View view{p};
  const int64_t G = view.group();
  // dq/dk/dv and dout share the strides of q/k/v and out.
  auto dq = [&](int64_t b, int64_t t, int64_t h) {
    return static_cast<float*>(bp.dq) + b * p.q_stride_b + t * p.q_stride_t + h * p.q_stride_h;
  };
  auto dk = [&](int64_t b, int64_t u, int64_t kvh) {
    return static_cast<float*>(bp.dk) + b * p.k_stride_b + u * p.k_stride_t + kvh * p.k_stride_h;
  };
  auto dv = [&](int64_t b, int64_t u, int64_t kvh) {
    return static_cast<float*>(bp.dv) + b * p.v_stride_b + u * p.v_stride_t + kvh * p.v_stride_h;
  };
  auto dout = [&](int64_t b, int64_t t, int64_t h) {
    return static_cast<const float*>(bp.dout) + b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h;
  };
  ParallelForItems(ctx, p.B * p.NKV, G * p.T * p.S * p.HS * 8, [&](int64_t begin, int64_t end) {
    std::vector<float> prob(p.S);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / p.NKV, kvh = item % p.NKV;
      for (int64_t u = 0; u < p.S; ++u) {
        std::memset(dk(b, u, kvh), 0, sizeof(float) * p.HS);
        std::memset(dv(b, u, kvh), 0, sizeof(float) * p.HS);
      }
      for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
        for (int64_t t = 0; t < p.T; ++t) {
          float* dqt = dq(b, t, h);
          std::memset(dqt, 0, sizeof(float) * p.HS);
          const float lse = *view.lse(b, h, t);
          if (lse == -INFINITY) continue;
          const int64_t limit = view.KeyLimit(t);
          const float* dot = dout(b, t, h);
          const float* qt = view.q(b, t, h);
          const float D = vec::Dot(dot, view.out(b, t, h), p.HS);
          view.Scores(b, h, t, 0, limit, prob.data());
          for (int64_t u = 0; u < limit; ++u) {
            const float pu = std::exp(prob[u] - lse);
            if (pu == 0.0f) continue;
            vec::Axpy(pu, dot, dv(b, u, kvh), p.HS);
            const float ds = pu * (vec::Dot(dot, view.v(b, u, kvh), p.HS) - D) * p.scale;
            vec::Axpy(ds, view.k(b, u, kvh), dqt, p.HS);
            vec::Axpy(ds, qt, dk(b, u, kvh), p.HS);
          }
        }
      }
    }
  });
}

}  // namespace cpu
}  // namespace lmf::kernels
