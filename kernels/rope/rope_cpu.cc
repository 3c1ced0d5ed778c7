// CPU RoPE: cos/sin of the angles (computed in double, rounded once) in one (T, HS/2) table per call when
// the batch shares positions, else per (batch, time) row; then one pass rotating pairs, (batch, time) rows
// split over threads. Backward rotates by the negative angle.
#include <cmath>
#include <vector>

#include "base/check.h"
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

// cos and sin of pos * inv_freq[i] for i < half, computed in double and rounded once; sin negated for the
// inverse rotation.
void Angles(double pos, const std::vector<double>& inv_freq, float sign, float* cs, float* sn) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double angle = pos * inv_freq[i];
    cs[i] = static_cast<float>(std::cos(angle));
    sn[i] = sign * static_cast<float>(std::sin(angle));
  }
}

void Rotate(const Context& ctx, const RopeParams& p, float sign) {
  LMF_CHECK(p.HS % 2 == 0) << "rope: head size " << p.HS << " is odd";
  const int64_t half = p.HS / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(static_cast<double>(p.theta), -2.0 * static_cast<double>(i) / static_cast<double>(p.HS));
  // Positions shared by the batch (the usual case): one (T, HS/2) table for all rows.
  const bool shared = p.positions == nullptr || p.positions_stride_b == 0;
  std::vector<float> table_cos, table_sin;
  if (shared) {
    table_cos.resize(p.T * half);
    table_sin.resize(p.T * half);
    ParallelForItems(ctx, p.T, 40 * half, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const double pos = p.positions ? static_cast<double>(p.positions[t]) : static_cast<double>(t);
        Angles(pos, inv_freq, sign, table_cos.data() + t * half, table_sin.data() + t * half);
      }
    });
  }
  const float* in = static_cast<const float*>(p.in);
  float* out = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.B * p.T, (shared ? 4 : 40) * p.NH * p.HS, [&](int64_t begin, int64_t end) {
    std::vector<float> own_cos(shared ? 0 : half), own_sin(shared ? 0 : half);
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / p.T, t = bt % p.T;
      const float* cs;
      const float* sn;
      if (shared) {
        cs = table_cos.data() + t * half;
        sn = table_sin.data() + t * half;
      } else {
        Angles(static_cast<double>(p.positions[b * p.positions_stride_b + t]), inv_freq, sign, own_cos.data(),
               own_sin.data());
        cs = own_cos.data();
        sn = own_sin.data();
      }
      for (int64_t h = 0; h < p.NH; ++h) {
        const float* x = in + b * p.in_stride_b + t * p.in_stride_t + h * p.in_stride_h;
        float* y = out + b * p.out_stride_b + t * p.out_stride_t + h * p.out_stride_h;
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = x[2 * i], x1 = x[2 * i + 1];
          y[2 * i] = x0 * cs[i] - x1 * sn[i];
          y[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
        }
      }
    }
  });
}

}  // namespace

void RopeForward(const Context& ctx, const RopeParams& p) { Rotate(ctx, p, 1.0f); }
void RopeBackward(const Context& ctx, const RopeParams& p) { Rotate(ctx, p, -1.0f); }

}  // namespace cpu
}  // namespace lmf::kernels
