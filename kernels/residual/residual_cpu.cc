// CPU residual add and its backward (accumulate dout into both inputs' gradients); elements split over
// threads.
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/residual/residual.h"

namespace lmf::kernels::cpu {

void ResidualForward(const Context& ctx, const ResidualForwardParams& p) {
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
  float* out = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.n, 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}

void ResidualBackward(const Context& ctx, const ResidualBackwardParams& p) {
  const float* dout = static_cast<const float*>(p.dout);
  ParallelForItems(ctx, p.n, 4, [&](int64_t begin, int64_t end) {
    if (p.da != nullptr) vec::AddInto(dout + begin, static_cast<float*>(p.da) + begin, end - begin);
    if (p.db != nullptr) vec::AddInto(dout + begin, static_cast<float*>(p.db) + begin, end - begin);
  });
}

}  // namespace lmf::kernels::cpu
