// CPU residual add and its backward (accumulate dout into both inputs' gradients); elements split over
// threads. bf16 runs the fp32 loops on fp32 twins (kernels/cpu/bf16.h).
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/residual/residual.h"

namespace lmf::kernels::cpu {
namespace {

using Use = F32Twin::Use;

// bf16: the fp32 kernel on fp32 twins (kernels/cpu/bf16.h); da and db accumulate in bf16.
void ResidualForwardBF16(const Context& ctx, const ResidualForwardParams& p) {
  const RowView all = RowView::Contiguous(p.n);
  const F32Twin a(ctx, p.dtype, p.a, all, Use::kInput), b(ctx, p.dtype, p.b, all, Use::kInput);
  const F32Twin out(ctx, p.dtype, p.out, all, Use::kOutput);
  ResidualForwardParams f = p;
  f.dtype = DType::kF32;
  f.a = a.data(), f.b = b.data(), f.out = out.data();
  cpu::ResidualForward(ctx, f);
  out.Store(ctx);
}

void ResidualBackwardBF16(const Context& ctx, const ResidualBackwardParams& p) {
  const RowView all = RowView::Contiguous(p.n);
  const F32Twin dout(ctx, p.dtype, p.dout, all, Use::kInput);
  const F32Twin da(ctx, p.dtype, p.da, all, Use::kAccumulate), db(ctx, p.dtype, p.db, all, Use::kAccumulate);
  ResidualBackwardParams f = p;
  f.dtype = DType::kF32;
  f.dout = dout.data(), f.da = da.data(), f.db = db.data();
  cpu::ResidualBackward(ctx, f);
  da.Store(ctx);
  db.Store(ctx);
}

}  // namespace

void ResidualForward(const Context& ctx, const ResidualForwardParams& p) {
  if (p.dtype == DType::kBF16) return ResidualForwardBF16(ctx, p);
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
  float* out = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.n, 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}

void ResidualBackward(const Context& ctx, const ResidualBackwardParams& p) {
  if (p.dtype == DType::kBF16) return ResidualBackwardBF16(ctx, p);
  const float* dout = static_cast<const float*>(p.dout);
  ParallelForItems(ctx, p.n, 4, [&](int64_t begin, int64_t end) {
    if (p.da != nullptr) vec::AddInto(dout + begin, static_cast<float*>(p.da) + begin, end - begin);
    if (p.db != nullptr) vec::AddInto(dout + begin, static_cast<float*>(p.db) + begin, end - begin);
  });
}

}  // namespace lmf::kernels::cpu
