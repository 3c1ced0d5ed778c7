// CPU RoPE: a (positions x HS/2) cos/sin table per call (angles in double, rounded once), then one pass
// rotating pairs; (batch, time) rows split over threads. Backward rotates by the negative angle.
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

void Rotate(const Context& ctx, const RopeParams& p, float sign) {
  LMF_CHECK(p.HS % 2 == 0) << "rope: head size " << p.HS << " is odd";
  const int64_t half = p.HS / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(static_cast<double>(p.theta), -2.0 * static_cast<double>(i) / static_cast<double>(p.HS));
  const float* in = static_cast<const float*>(p.in);
  float* out = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.B * p.T, 8 * p.NH * p.HS, [&](int64_t begin, int64_t end) {
    std::vector<float> cs(half), sn(half);
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / p.T, t = bt % p.T;
      const double pos = p.positions ? static_cast<double>(p.positions[b * p.positions_stride_b + t]) : static_cast<double>(t);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(angle));
        sn[i] = sign * static_cast<float>(std::sin(angle));
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
