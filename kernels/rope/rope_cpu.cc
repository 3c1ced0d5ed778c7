// CPU RoPE: cos/sin of the angles (computed in double, rounded once) in one (T, HS) table per call when
// the batch shares positions, else per (batch, time) row, each value twice (for both elements of its pair);
// then one pass rotating pairs eight elements at a time (AVX2), (batch, time) rows split over threads.
// Backward rotates by the negative angle.
#include <immintrin.h>

#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/parallel.h"
#include "kernels/rope/rope.h"

namespace lmf::kernels {

RopeParams ContiguousRopeParams(int64_t B, int64_t T, int64_t NH, int64_t HS, float theta, const void* in, void* out) {
  RopeParams p;
  p.B = B, p.T = T, p.NH = NH, p.HS = HS, p.theta = theta;
  p.in = in, p.out = out;
  p.in_stride_b = p.out_stride_b = T * NH * HS;
  p.in_stride_t = p.out_stride_t = NH * HS;
  p.in_stride_h = p.out_stride_h = HS;
  return p;
}

namespace cpu {
namespace {

// cos and sin of pos * inv_freq[i] for i < half, computed in double and rounded once, each twice in a row
// (the pair's two elements): cs2[2i] = cs2[2i+1] = cos, sn2[2i] = -sign sin, sn2[2i+1] = sign sin (sign -1
// for the inverse rotation).
void Angles(double pos, const std::vector<double>& inv_freq, float sign, float* cs2, float* sn2) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double angle = pos * inv_freq[i];
    const float c = static_cast<float>(std::cos(angle)), sn = sign * static_cast<float>(std::sin(angle));
    cs2[2 * i] = cs2[2 * i + 1] = c;
    sn2[2 * i] = -sn;
    sn2[2 * i + 1] = sn;
  }
}

// One head's row: y[2i] = x[2i] c - x[2i+1] s, y[2i+1] = x[2i+1] c + x[2i] s, eight elements (four pairs) at
// a time as y = x * cs2 + swap_pairs(x) * sn2 (separate multiplies and an add: the same roundings as the
// scalar form, which does the tail). In place (x == y) is fine.
void RotateRow(const float* x, const float* cs2, const float* sn2, int64_t HS, float* y) {
  int64_t d = 0;
  for (; d + 8 <= HS; d += 8) {
    const __m256 v = _mm256_loadu_ps(x + d);
    const __m256 swapped = _mm256_permute_ps(v, 0xB1);  // (x1, x0, x3, x2, ...)
    _mm256_storeu_ps(y + d, _mm256_add_ps(_mm256_mul_ps(v, _mm256_loadu_ps(cs2 + d)),
                                          _mm256_mul_ps(swapped, _mm256_loadu_ps(sn2 + d))));
  }
  for (; d < HS; d += 2) {
    const float x0 = x[d], x1 = x[d + 1];
    y[d] = x0 * cs2[d] + x1 * sn2[d];
    y[d + 1] = x1 * cs2[d + 1] + x0 * sn2[d + 1];
  }
}

void Rotate(const Context& ctx, const RopeParams& p, float sign) {
  LMF_CHECK(p.HS % 2 == 0) << "rope: head size " << p.HS << " is odd";
  const int64_t half = p.HS / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(static_cast<double>(p.theta), -2.0 * static_cast<double>(i) / static_cast<double>(p.HS));
  // Positions shared by the batch (the usual case): one (T, HS) table for all rows.
  const bool shared = p.positions == nullptr || p.positions_stride_b == 0;
  std::vector<float> table_cos, table_sin;
  if (shared) {
    table_cos.resize(p.T * p.HS);
    table_sin.resize(p.T * p.HS);
    ParallelForItems(ctx, p.T, 40 * half, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const double pos = p.positions ? static_cast<double>(p.positions[t]) : static_cast<double>(t);
        Angles(pos, inv_freq, sign, table_cos.data() + t * p.HS, table_sin.data() + t * p.HS);
      }
    });
  }
  const float* in = static_cast<const float*>(p.in);
  float* out = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.B * p.T, (shared ? 2 : 40) * p.NH * p.HS, [&](int64_t begin, int64_t end) {
    std::vector<float> own_cos(shared ? 0 : p.HS), own_sin(shared ? 0 : p.HS);
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / p.T, t = bt % p.T;
      const float* cs;
      const float* sn;
      if (shared) {
        cs = table_cos.data() + t * p.HS;
        sn = table_sin.data() + t * p.HS;
      } else {
        Angles(static_cast<double>(p.positions[b * p.positions_stride_b + t]), inv_freq, sign, own_cos.data(),
               own_sin.data());
        cs = own_cos.data();
        sn = own_sin.data();
      }
      for (int64_t h = 0; h < p.NH; ++h) {
        RotateRow(in + b * p.in_stride_b + t * p.in_stride_t + h * p.in_stride_h, cs, sn, p.HS,
                  out + b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h);
      }
    }
  });
}

// bf16 (in, out): the fp32 rotation on packed fp32 twins (kernels/cpu/bf16.h). out may alias in: the input
// twin is read before the output is stored.
void RotateBF16(const Context& ctx, const RopeParams& p, float sign) {
  const F32Twin in(ctx, p.dtype, p.in, RowView::Heads(p.B, p.T, p.NH, p.HS, p.in_stride_b, p.in_stride_t, p.in_stride_h),
                   F32Twin::Use::kInput);
  const F32Twin out(ctx, p.dtype, p.out,
                    RowView::Heads(p.B, p.T, p.NH, p.HS, p.out_stride_b, p.out_stride_t, p.out_stride_h),
                    F32Twin::Use::kOutput);
  RopeParams f = p;
  f.dtype = DType::kF32;
  f.in = in.data(), f.in_stride_b = in.stride(0), f.in_stride_t = in.stride(1), f.in_stride_h = in.stride(2);
  f.out = out.data(), f.out_stride_b = out.stride(0), f.out_stride_t = out.stride(1), f.out_stride_h = out.stride(2);
  Rotate(ctx, f, sign);
  out.Store(ctx);
}

void Run(const Context& ctx, const RopeParams& p, float sign) {
  if (p.dtype == DType::kBF16) return RotateBF16(ctx, p, sign);
  Rotate(ctx, p, sign);
}

}  // namespace

void RopeForward(const Context& ctx, const RopeParams& p) { Run(ctx, p, 1.0f); }
void RopeBackward(const Context& ctx, const RopeParams& p) { Run(ctx, p, -1.0f); }

}  // namespace cpu
}  // namespace lmf::kernels
