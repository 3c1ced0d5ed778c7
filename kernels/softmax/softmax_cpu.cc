// CPU softmax over rows: max, exp-and-sum with vec::Exp, scale; rows split over threads.
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/softmax/softmax.h"

namespace lmf::kernels::cpu {

void SoftmaxForward(const Context& ctx, const SoftmaxForwardParams& p) {
  const float* x = static_cast<const float*>(p.x);
  float* out = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.N, 20 * p.C, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* xr = x + n * p.C;
      float* yr = out + n * p.C;
      const float mx = vec::Max(xr, p.C);
      const float sum = vec::ExpShiftSum(xr, mx, yr, p.C);
      vec::Scale(1.0f / sum, yr, p.C);
    }
  });
}

void SoftmaxBackward(const Context& ctx, const SoftmaxBackwardParams& p) {
  const float* y = static_cast<const float*>(p.out);
  const float* dy = static_cast<const float*>(p.dout);
  float* dx = static_cast<float*>(p.dx);
  ParallelForItems(ctx, p.N, 4 * p.C, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* yr = y + n * p.C;
      const float* dyr = dy + n * p.C;
      float* dxr = dx + n * p.C;
      const float dot = vec::Dot(yr, dyr, p.C);
      for (int64_t c = 0; c < p.C; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
    }
  });
}

}  // namespace lmf::kernels::cpu
