// CPU attention.
// Forward, kTiled: work items are (batch, query head, block of kQueryBlock queries); each walks the keys in
// blocks of kKeyBlock (skipping blocks entirely above the causal diagonal or before the window): S = Q K^T
// and acc += P V are register-blocked small GEMMs over groups of RowGroup() queries, each only up to its last
// query's causal limit (on the diagonal block half the work), and per query a running max and sum rescale
// acc (online softmax), so memory per thread is one (kQueryBlock, kKeyBlock) block of scores and the K^T of
// one kv head's key blocks (each transposed once per thread and head). Exponentials are taken only of the
// keys a query may see.
// Forward, kPlain: per (batch, head) the full (T, S) score matrix, softmax, then P V; the reference.
// Backward (both algorithms): on (kQueryBlock, kKeyBlock) tiles, P is recomputed from lse and
//   D = rowsum(dO * O), dV += P^T dO, dS = scale P (dO V^T - D), dQ += dS K, dK += dS^T Q
// as small GEMMs with the same causal trimming; dK and dV are accumulated transposed (HS x keys, so the
// GEMMs' wide side is the keys, not a head size that may be 8) from P and dS as stored, without transposed
// copies. No T x S buffer. Work split (AttentionBackwardSchedule): per (batch, kv head), so the
// dk/dv of a kv head belong to one thread and dq is added tile by tile; or, when there are few such pairs,
// per (batch, kv head, key block) for dk/dv and then per (batch, head, query block) for dq.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "base/check.h"
#include "kernels/attention/attention.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/cpu/vec.h"

namespace lmf::kernels {

AttentionParams ContiguousAttentionParams(int64_t B, int64_t T, int64_t S, int64_t NH, int64_t NKV,
                                          int64_t HS, bool causal, const void* q, const void* k,
                                          const void* v, void* out, float* lse) {
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

bool AttentionSupported(Device device, DType dtype, int64_t head_size) {
  if (head_size <= 0 || !BackendSupports("attention", device, dtype)) return false;
  if (device.is_cpu()) return true;
  if (dtype == DType::kBF16) return head_size == 64 || head_size == 128;  // the tensor-core kernels
  return head_size == 32 || head_size == 64 || head_size == 128;          // the fp32 CUDA-core kernels
}

namespace cpu {
namespace {

constexpr int64_t kQueryBlock = 64;
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
  // Keys [KeyStart(t), KeyLimit(t)) may be visible to query t (the window and causal cuts); the mask may hide
  // more.
  int64_t KeyStart(int64_t t) const {
    return p.window > 0 ? std::min(p.S, std::max<int64_t>(0, t - p.window + 1)) : 0;
  }
  int64_t KeyLimit(int64_t t) const { return p.causal ? std::min(p.S, t + 1) : p.S; }
  // How many of the keys u0 + j, j < len, come before query t's causal limit.
  int64_t KeysBeforeLimit(int64_t t, int64_t u0, int64_t len) const {
    return std::max<int64_t>(0, std::min(len, KeyLimit(t) - u0));
  }
  // A scaled score after the soft-cap (unchanged without one).
  float Cap(float s) const { return p.softcap > 0 ? p.softcap * std::tanh(s / p.softcap) : s; }
  const uint8_t* MaskRow(int64_t b, int64_t h, int64_t t) const {
    return p.mask ? p.mask + b * p.mask_stride_b + h * p.mask_stride_h + t * p.mask_stride_t : nullptr;
  }
  // scores s[j] = scale q . k[u0 + j] (soft-capped) for j < len, -inf where masked.
  void Scores(int64_t b, int64_t h, int64_t t, int64_t u0, int64_t len, float* s) const {
    const float* qt = q(b, t, h);
    const int64_t kvh = h / group();
    const uint8_t* mrow = MaskRow(b, h, t);
    const int64_t start = KeyStart(t);
    for (int64_t j = 0; j < len; ++j) {
      s[j] = (u0 + j < start || (mrow != nullptr && mrow[u0 + j] == 0))
                 ? -INFINITY
                 : Cap(p.scale * vec::Dot(qt, k(b, u0 + j, kvh), p.HS));
    }
  }
};

void CheckParams(const AttentionParams& p) {
  LMF_CHECK(p.B > 0 && p.T > 0 && p.S > 0 && p.NH > 0 && p.NKV > 0 && p.HS > 0)
      << "attention: B=" << p.B << " T=" << p.T << " S=" << p.S << " NH=" << p.NH << " NKV=" << p.NKV
      << " HS=" << p.HS;
  LMF_CHECK(p.NH % p.NKV == 0) << "attention: NKV=" << p.NKV << " does not divide NH=" << p.NH;
  LMF_CHECK(p.lse != nullptr) << "attention: lse buffer (B, NH, T) is required";
  LMF_CHECK(p.window >= 0) << "attention: window=" << p.window << " must be >= 0 (0: none)";
  LMF_CHECK(p.softcap >= 0 && std::isfinite(p.softcap))
      << "attention: softcap=" << p.softcap << " must be finite and >= 0 (0: none)";
}

// Queries are scored in groups of RowGroup() (SmallGemm's register tile height: 6 rows on AVX2, 4 on
// AVX-512): a group needs the keys of a block only up to its last query's causal limit, so on a block the
// causal diagonal crosses, about half of the scores and products are never computed. (The grouping changes
// which scores past a query's limit are computed, never what is kept: the results are the same.)
int64_t RowGroup() { return vec::UseAvx512() ? 4 : 6; }
// The backward's dK and dV products go in groups of kKeyGroup keys (SmallGemm's AVX2 tile width; one
// 16-column tile on AVX-512), each group from the first query that sees any of its keys.
constexpr int64_t kKeyGroup = 16;

// The number of keys u0 + j (j < len) of a block to score for a group of queries ending with t: those t may
// see (the earlier queries see no more), rounded up to a multiple of 8 (SmallGemm's vector width; the
// scores past t's limit are ignored and P is 0 there).
int64_t KeysSeen(const View& view, int64_t t, int64_t u0, int64_t len) {
  return std::min(len, (view.KeysBeforeLimit(t, u0, len) + 7) / 8 * 8);
}

// Scales query t's raw scores q.k for keys [u0, u0 + visible) by `scale` (and soft-caps them) and sets those
// before its window or hidden by the mask to -inf, where visible (returned) counts the keys of the row's
// first n up to t's causal limit. The rest of the row is left as it is: callers skip it. (Keys before the
// window are -inf like masked ones, not skipped, so that a window and the mask of it sum the same
// exponentials in the same order: bitwise the same results.)
int64_t PrepareRow(const View& view, int64_t b, int64_t h, int64_t t, int64_t u0, int64_t n, float* row) {
  const int64_t visible = view.KeysBeforeLimit(t, u0, n);
  const int64_t first = std::min(visible, std::max<int64_t>(0, view.KeyStart(t) - u0));
  const uint8_t* mrow = view.MaskRow(b, h, t);
  std::fill(row, row + first, -INFINITY);
  if (mrow == nullptr && view.p.softcap == 0) {
    vec::Scale(view.p.scale, row + first, visible - first);
    return visible;
  }
  for (int64_t j = first; j < visible; ++j)
    row[j] = (mrow != nullptr && mrow[u0 + j] == 0) ? -INFINITY : view.Cap(row[j] * view.p.scale);
  return visible;
}

void ForwardTiled(const Context& ctx, const AttentionParams& p) {
  const View view{p};
  const int64_t qblocks = (p.T + kQueryBlock - 1) / kQueryBlock, kblocks = (p.S + kKeyBlock - 1) / kKeyBlock;
  const int64_t items = p.B * p.NH * qblocks;
  const int64_t row_group = RowGroup();
  ParallelForItems(ctx, items, kQueryBlock * p.S * p.HS * 4, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(kQueryBlock * p.HS), run_max(kQueryBlock), run_sum(kQueryBlock);
    std::vector<float> s(kQueryBlock * kKeyBlock);
    // K^T of the current (batch, kv head)'s key blocks, each (HS, kKeyBlock), transposed on first use: a
    // thread's items run through a head's query blocks (and a GQA group's heads) in order, and each used to
    // transpose every key block again. Left uninitialised: only the blocks a thread reads are written (and
    // their pages touched), so a long sliding-window sequence costs the window, not S x HS.
    std::unique_ptr<float[]> kt_head(new float[kblocks * p.HS * kKeyBlock]);
    std::vector<char> kt_ready(kblocks);
    int64_t kt_b = -1, kt_kvh = -1;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / (p.NH * qblocks), h = (item / qblocks) % p.NH, qb = item % qblocks;
      const int64_t t0 = qb * kQueryBlock, tlen = std::min(kQueryBlock, p.T - t0);
      const int64_t kvh = h / view.group();
      if (b != kt_b || kvh != kt_kvh) {
        std::fill(kt_ready.begin(), kt_ready.end(), 0);
        kt_b = b, kt_kvh = kvh;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(run_max.begin(), run_max.end(), -INFINITY);
      std::fill(run_sum.begin(), run_sum.end(), 0.0f);
      // Key blocks before the first query's window hide every score of the block: skipped.
      const int64_t key_end = view.KeyLimit(t0 + tlen - 1);
      for (int64_t u0 = view.KeyStart(t0) / kKeyBlock * kKeyBlock; u0 < key_end; u0 += kKeyBlock) {
        const int64_t len = std::min(kKeyBlock, key_end - u0);
        // K^T (HS, the whole block): later query blocks see more of it than this one's len.
        const int64_t kb = u0 / kKeyBlock;
        float* kt = kt_head.get() + kb * p.HS * kKeyBlock;
        if (!kt_ready[kb]) {
          vec::Transpose(std::min(kKeyBlock, p.S - u0), p.HS, view.k(b, u0, kvh), p.k_stride_t, kt, kKeyBlock);
          kt_ready[kb] = 1;
        }
        for (int64_t r0 = 0; r0 < tlen; r0 += row_group) {
          const int64_t rows = std::min(row_group, tlen - r0);
          const int64_t n = KeysSeen(view, t0 + r0 + rows - 1, u0, len);
          if (n == 0) continue;
          float* block = s.data() + r0 * kKeyBlock;
          vec::SmallGemm(rows, n, p.HS, view.q(b, t0 + r0, h), p.q_stride_t, kt, kKeyBlock, block, kKeyBlock,
                         false);
          for (int64_t i = r0; i < r0 + rows; ++i) {
            float* row = s.data() + i * kKeyBlock;
            const int64_t visible = PrepareRow(view, b, h, t0 + i, u0, n, row);
            const float block_max = vec::Max(row, visible);
            if (block_max == -INFINITY) {  // nothing visible: P's row is 0
              std::fill(row, row + n, 0.0f);
              continue;
            }
            const float new_max = std::max(run_max[i], block_max);
            if (run_max[i] != -INFINITY && new_max != run_max[i]) {
              const float correction = std::exp(run_max[i] - new_max);
              run_sum[i] *= correction;
              vec::Scale(correction, acc.data() + i * p.HS, p.HS);
            }
            run_max[i] = new_max;
            // Rows are kKeyBlock wide: room for the padded tail, which zeroes up to visible rounded up to 8.
            run_sum[i] += vec::ExpShiftSumPadded(row, new_max, row, visible);
            std::fill(row + std::min(n, vec::PaddedEnd(visible)), row + n, 0.0f);
          }
          vec::SmallGemm(rows, p.HS, n, block, kKeyBlock, view.v(b, u0, kvh), p.v_stride_t,
                         acc.data() + r0 * p.HS, p.HS, true);
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

// bf16 q, k, v, out, dout, dq, dk, dv (lse fp32): the fp32 kernels on packed fp32 twins (kernels/cpu/bf16.h),
// so the math, the softmax statistics and P and dS stay fp32.
struct TwinsBF16 {
  F32Twin q, k, v, out;
  AttentionParams f;  // p on the twins, dtype f32
};

RowView QView(const AttentionParams& p) {
  return RowView::Heads(p.B, p.T, p.NH, p.HS, p.q_stride_b, p.q_stride_t, p.q_stride_h);
}
RowView KView(const AttentionParams& p) {
  return RowView::Heads(p.B, p.S, p.NKV, p.HS, p.k_stride_b, p.k_stride_t, p.k_stride_h);
}
RowView VView(const AttentionParams& p) {
  return RowView::Heads(p.B, p.S, p.NKV, p.HS, p.v_stride_b, p.v_stride_t, p.v_stride_h);
}
RowView OutView(const AttentionParams& p) {
  return RowView::Heads(p.B, p.T, p.NH, p.HS, p.out_stride_b, p.out_stride_t, p.out_stride_h);
}

TwinsBF16 MakeTwins(const Context& ctx, const AttentionParams& p, F32Twin::Use out_use) {
  TwinsBF16 t{F32Twin(ctx, p.dtype, p.q, QView(p), F32Twin::Use::kInput),
              F32Twin(ctx, p.dtype, p.k, KView(p), F32Twin::Use::kInput),
              F32Twin(ctx, p.dtype, p.v, VView(p), F32Twin::Use::kInput),
              F32Twin(ctx, p.dtype, p.out, OutView(p), out_use), p};
  t.f.dtype = DType::kF32;
  t.f.q = t.q.data(), t.f.q_stride_b = t.q.stride(0), t.f.q_stride_t = t.q.stride(1), t.f.q_stride_h = t.q.stride(2);
  t.f.k = t.k.data(), t.f.k_stride_b = t.k.stride(0), t.f.k_stride_t = t.k.stride(1), t.f.k_stride_h = t.k.stride(2);
  t.f.v = t.v.data(), t.f.v_stride_b = t.v.stride(0), t.f.v_stride_t = t.v.stride(1), t.f.v_stride_h = t.v.stride(2);
  t.f.out = t.out.data(), t.f.out_stride_b = t.out.stride(0), t.f.out_stride_t = t.out.stride(1);
  t.f.out_stride_h = t.out.stride(2);
  return t;
}

void ForwardBF16(const Context& ctx, const AttentionParams& p) {
  const TwinsBF16 t = MakeTwins(ctx, p, F32Twin::Use::kOutput);
  cpu::AttentionForward(ctx, t.f);
  t.out.Store(ctx);
}

void BackwardBF16(const Context& ctx, const AttentionBackwardParams& bp) {
  const AttentionParams& p = bp.forward;
  const TwinsBF16 t = MakeTwins(ctx, p, F32Twin::Use::kInput);
  // dq, dk, dv and dout are strided like q, k, v and out, so their packed twins have the same strides.
  const F32Twin dout(ctx, p.dtype, bp.dout, OutView(p), F32Twin::Use::kInput);
  const F32Twin dq(ctx, p.dtype, bp.dq, QView(p), F32Twin::Use::kOutput);
  const F32Twin dk(ctx, p.dtype, bp.dk, KView(p), F32Twin::Use::kOutput);
  const F32Twin dv(ctx, p.dtype, bp.dv, VView(p), F32Twin::Use::kOutput);
  AttentionBackwardParams f = bp;
  f.forward = t.f;
  f.dout = dout.data(), f.dq = dq.data(), f.dk = dk.data(), f.dv = dv.data();
  cpu::AttentionBackward(ctx, f);
  dq.Store(ctx);
  dk.Store(ctx);
  dv.Store(ctx);
}

}  // namespace

void AttentionForward(const Context& ctx, const AttentionParams& p) {
  if (p.dtype == DType::kBF16) return ForwardBF16(ctx, p);
  CheckParams(p);
  if (p.algorithm == AttentionAlgorithm::kPlain) {
    ForwardPlain(ctx, p);
  } else {
    ForwardTiled(ctx, p);
  }
}

// The backward's strided gradient views (dq/dk/dv share the strides of q/k/v, dout those of out), its
// scratch, and the work on one (query block, key block) tile.
struct BackwardView {
  const AttentionBackwardParams& bp;
  const AttentionParams& p = bp.forward;
  float* dq(int64_t b, int64_t t, int64_t h) const {
    return static_cast<float*>(bp.dq) + b * p.q_stride_b + t * p.q_stride_t + h * p.q_stride_h;
  }
  float* dk(int64_t b, int64_t u, int64_t kvh) const {
    return static_cast<float*>(bp.dk) + b * p.k_stride_b + u * p.k_stride_t + kvh * p.k_stride_h;
  }
  float* dv(int64_t b, int64_t u, int64_t kvh) const {
    return static_cast<float*>(bp.dv) + b * p.v_stride_b + u * p.v_stride_t + kvh * p.v_stride_h;
  }
  const float* dout(int64_t b, int64_t t, int64_t h) const {
    return static_cast<const float*>(bp.dout) + b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h;
  }
};

struct BackwardScratch {
  explicit BackwardScratch(int64_t HS)
      : kt(HS * kKeyBlock),
        vt(HS * kKeyBlock),
        dk_acc(HS * kKeyBlock),
        dv_acc(HS * kKeyBlock),
        prob(kQueryBlock * kKeyBlock),
        dprob(kQueryBlock * kKeyBlock),
        dcap(kQueryBlock * kKeyBlock) {}
  // kt, vt: the key block's K^T and V^T; dk_acc, dv_acc: its dK^T and dV^T (all HS x kKeyBlock); prob, dprob,
  // dcap: a tile's P, dP then dS, and the soft-cap's derivative (kQueryBlock x kKeyBlock).
  std::vector<float> kt, vt, dk_acc, dv_acc, prob, dprob, dcap;
};

// Packs key block [u0, u0 + len) of kv head kvh transposed into s.kt and s.vt.
void PackKeyBlock(const View& view, int64_t b, int64_t kvh, int64_t u0, int64_t len, BackwardScratch& s) {
  vec::Transpose(len, view.p.HS, view.k(b, u0, kvh), view.p.k_stride_t, s.kt.data(), kKeyBlock);
  vec::Transpose(len, view.p.HS, view.v(b, u0, kvh), view.p.v_stride_t, s.vt.data(), kKeyBlock);
}

// One tile: queries [t0, t0 + tlen) of head h, keys [u0, u0 + len) (packed in s.kt/s.vt). D holds
// rowsum(dO * O) for the tile's queries. Adds the tile's dV^T and dK^T into s.dv_acc/s.dk_acc when
// want_dkdv, and its dQ into dq when want_dq. Per group of queries only the keys up to the group's causal
// limit are scored, and per group of keys only the queries from the first that sees them are summed.
void BackwardTile(const View& view, const BackwardView& g, int64_t b, int64_t h, int64_t t0, int64_t tlen,
                  int64_t u0, int64_t len, const float* D, BackwardScratch& s, bool want_dkdv, bool want_dq) {
  const AttentionParams& p = view.p;
  const int64_t HS = p.HS, kvh = h / view.group();
  constexpr int64_t Bk = kKeyBlock;
  // P = exp(scale q.k - lse) and dS = scale P (dO V^T - D) (times the soft-cap's derivative), 0 where masked,
  // past the causal limit, or where the whole row is masked (lse = -inf).
  const int64_t row_group = RowGroup();
  for (int64_t r0 = 0; r0 < tlen; r0 += row_group) {
    const int64_t rows = std::min(row_group, tlen - r0);
    const int64_t n = KeysSeen(view, t0 + r0 + rows - 1, u0, len);
    float* prob = s.prob.data() + r0 * Bk;
    float* dprob = s.dprob.data() + r0 * Bk;
    if (n > 0) {
      vec::SmallGemm(rows, n, HS, view.q(b, t0 + r0, h), p.q_stride_t, s.kt.data(), Bk, prob, Bk, false);
      vec::SmallGemm(rows, n, HS, g.dout(b, t0 + r0, h), p.out_stride_t, s.vt.data(), Bk, dprob, Bk, false);
    }
    for (int64_t i = 0; i < rows; ++i) {
      float* pr = prob + i * Bk;
      float* ds = dprob + i * Bk;
      const float lse = *view.lse(b, h, t0 + r0 + i);
      const int64_t visible = lse == -INFINITY ? 0 : PrepareRow(view, b, h, t0 + r0 + i, u0, n, pr);
      if (p.softcap > 0) {  // d cap(x) / dx = 1 - (cap(x) / softcap)^2, from the capped scores before exp
        float* dc = s.dcap.data() + (r0 + i) * Bk;
        for (int64_t j = 0; j < visible; ++j) {
          const float c = pr[j] == -INFINITY ? 0.0f : pr[j] / p.softcap;
          dc[j] = 1.0f - c * c;
        }
      }
      vec::ExpShiftSumPadded(pr, lse, pr, visible);  // rows Bk wide: room for the padded tail
      const float d = D[r0 + i];
      for (int64_t j = 0; j < visible; ++j) ds[j] = p.scale * pr[j] * (ds[j] - d);
      if (p.softcap > 0) {
        const float* dc = s.dcap.data() + (r0 + i) * Bk;
        for (int64_t j = 0; j < visible; ++j) ds[j] *= dc[j];
      }
      std::fill(pr + std::min(len, vec::PaddedEnd(visible)), pr + len, 0.0f);
      std::fill(ds + visible, ds + len, 0.0f);
    }
  }
  if (want_dkdv) {
    // dV^T += dO^T P and dK^T += Q^T dS (HS x keys: the wide dimension is the keys, not a small HS), per
    // group of kKeyGroup keys from the first query that sees any of them. Where every query of the tile sees
    // every key (not causal, or the tile below the diagonal) all groups start at the first query, so the
    // block goes as one group: the same sums, in wider register tiles (AVX-512's 64-column ones).
    const bool all_seen = !p.causal || u0 + len - 1 <= t0;
    const int64_t group = all_seen ? len : kKeyGroup;
    for (int64_t j0 = 0; j0 < len; j0 += group) {
      const int64_t keys = std::min(group, len - j0);
      const int64_t i0 = p.causal ? std::min(tlen, std::max<int64_t>(0, u0 + j0 - t0)) : 0;
      if (i0 == tlen) break;
      vec::SmallGemmTransA(HS, keys, tlen - i0, g.dout(b, t0 + i0, h), p.out_stride_t,
                           s.prob.data() + i0 * Bk + j0, Bk, s.dv_acc.data() + j0, Bk, true);
      vec::SmallGemmTransA(HS, keys, tlen - i0, view.q(b, t0 + i0, h), p.q_stride_t,
                           s.dprob.data() + i0 * Bk + j0, Bk, s.dk_acc.data() + j0, Bk, true);
    }
  }
  if (want_dq) {  // dQ += dS K
    for (int64_t r0 = 0; r0 < tlen; r0 += row_group) {
      const int64_t rows = std::min(row_group, tlen - r0);
      const int64_t n = KeysSeen(view, t0 + r0 + rows - 1, u0, len);
      if (n == 0) continue;
      vec::SmallGemm(rows, HS, n, s.dprob.data() + r0 * Bk, Bk, view.k(b, u0, kvh), p.k_stride_t,
                     g.dq(b, t0 + r0, h), p.q_stride_t, true);
    }
  }
}

// First query block that sees any key of the block starting at u0 (causal: queries before u0 see none).
int64_t FirstQueryBlockStart(const AttentionParams& p, int64_t u0) {
  return p.causal ? std::min(u0, p.T) / kQueryBlock * kQueryBlock : 0;
}
// One past the last query that sees any key of the block [u0, u0 + len) (a window: queries from
// u0 + len - 1 + window on see none of it).
int64_t QueryEnd(const AttentionParams& p, int64_t u0, int64_t len) {
  return p.window > 0 ? std::min(p.T, u0 + len - 1 + p.window) : p.T;
}

void AttentionBackward(const Context& ctx, const AttentionBackwardParams& bp) {
  if (bp.forward.dtype == DType::kBF16) return BackwardBF16(ctx, bp);
  const AttentionParams& p = bp.forward;
  CheckParams(p);
  const View view{p};
  const BackwardView g{bp};
  const int64_t G = view.group(), HS = p.HS;
  constexpr int64_t Bq = kQueryBlock, Bk = kKeyBlock;
  const int64_t qblocks = (p.T + Bq - 1) / Bq, kblocks = (p.S + Bk - 1) / Bk;

  // D[b, h, t] = dout . out, and dq = 0.
  std::vector<float> D(p.B * p.NH * p.T);
  ParallelForItems(ctx, p.B * p.NH * p.T, 4 * HS, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (p.NH * p.T), h = (r / p.T) % p.NH, t = r % p.T;
      D[r] = vec::Dot(g.dout(b, t, h), view.out(b, t, h), HS);
      std::memset(g.dq(b, t, h), 0, sizeof(float) * HS);
    }
  });
  auto Drow = [&](int64_t b, int64_t h, int64_t t) { return D.data() + (b * p.NH + h) * p.T + t; };
  auto store_dkdv = [&](int64_t b, int64_t kvh, int64_t u0, int64_t len, const BackwardScratch& s) {
    // The accumulators are transposed: (HS, kKeyBlock).
    vec::Transpose(HS, len, s.dk_acc.data(), Bk, g.dk(b, u0, kvh), p.k_stride_t);
    vec::Transpose(HS, len, s.dv_acc.data(), Bk, g.dv(b, u0, kvh), p.v_stride_t);
  };

  if (bp.schedule != AttentionBackwardSchedule::kKeysThenQueries) {
    ParallelForItems(ctx, p.B * p.NKV, G * p.T * p.S * HS * 8, [&](int64_t begin, int64_t end) {
      BackwardScratch s(HS);
      for (int64_t item = begin; item < end; ++item) {
        const int64_t b = item / p.NKV, kvh = item % p.NKV;
        for (int64_t u0 = 0; u0 < p.S; u0 += Bk) {
          const int64_t len = std::min(Bk, p.S - u0);
          PackKeyBlock(view, b, kvh, u0, len, s);
          std::fill(s.dk_acc.begin(), s.dk_acc.end(), 0.0f);
          std::fill(s.dv_acc.begin(), s.dv_acc.end(), 0.0f);
          for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
            for (int64_t t0 = FirstQueryBlockStart(p, u0); t0 < QueryEnd(p, u0, len); t0 += Bq) {
              BackwardTile(view, g, b, h, t0, std::min(Bq, p.T - t0), u0, len, Drow(b, h, t0), s, true, true);
            }
          }
          store_dkdv(b, kvh, u0, len, s);
        }
      }
    });
    return;
  }
  // kKeysThenQueries: dk/dv per key block, then dq per query block.
  ParallelForItems(ctx, p.B * p.NKV * kblocks, G * p.T * Bk * HS * 8, [&](int64_t begin, int64_t end) {
    BackwardScratch s(HS);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / (p.NKV * kblocks), kvh = (item / kblocks) % p.NKV, u0 = (item % kblocks) * Bk;
      const int64_t len = std::min(Bk, p.S - u0);
      PackKeyBlock(view, b, kvh, u0, len, s);
      std::fill(s.dk_acc.begin(), s.dk_acc.end(), 0.0f);
      std::fill(s.dv_acc.begin(), s.dv_acc.end(), 0.0f);
      for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
        for (int64_t t0 = FirstQueryBlockStart(p, u0); t0 < QueryEnd(p, u0, len); t0 += Bq) {
          BackwardTile(view, g, b, h, t0, std::min(Bq, p.T - t0), u0, len, Drow(b, h, t0), s, true, false);
        }
      }
      store_dkdv(b, kvh, u0, len, s);
    }
  });
  ParallelForItems(ctx, p.B * p.NH * qblocks, Bq * p.S * HS * 6, [&](int64_t begin, int64_t end) {
    BackwardScratch s(HS);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / (p.NH * qblocks), h = (item / qblocks) % p.NH, t0 = (item % qblocks) * Bq;
      const int64_t tlen = std::min(Bq, p.T - t0), kvh = h / G;
      const int64_t key_end = view.KeyLimit(t0 + tlen - 1);
      for (int64_t u0 = view.KeyStart(t0) / Bk * Bk; u0 < key_end; u0 += Bk) {
        const int64_t len = std::min(Bk, p.S - u0);
        PackKeyBlock(view, b, kvh, u0, len, s);
        BackwardTile(view, g, b, h, t0, tlen, u0, len, Drow(b, h, t0), s, false, true);
      }
    }
  });
}

}  // namespace cpu
}  // namespace lmf::kernels
