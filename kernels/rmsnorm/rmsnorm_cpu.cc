// CPU RMSNorm: one pass per row for the sum of squares, one for the output; rows split over threads.
// The backward computes dx row by row and the weight gradient per thread, summed at the end in a fixed
// order (deterministic).
//   dx = rstd * (dout * w - x * rstd^2 * mean_c(dout * w * x))
#include <cmath>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/residual/residual.h"
#include "kernels/rmsnorm/rmsnorm.h"

namespace lmf::kernels::cpu {
namespace {

using Use = F32Twin::Use;

// bf16 (x, weight, out, dx, dout in bf16; rstd and dweight fp32): the fp32 kernels on fp32 twins.
void RmsNormForwardBF16(const Context& ctx, const RmsNormForwardParams& p) {
  const RowView rows = RowView::Contiguous(p.N * p.C), channels = RowView::Contiguous(p.C);
  const F32Twin x(ctx, p.dtype, p.x, rows, Use::kInput), w(ctx, p.dtype, p.weight, channels, Use::kInput);
  const F32Twin out(ctx, p.dtype, p.out, rows, Use::kOutput);
  RmsNormForwardParams f = p;
  f.dtype = DType::kF32;
  f.x = x.data(), f.weight = w.data(), f.out = out.data();
  cpu::RmsNormForward(ctx, f);
  out.Store(ctx);
}

void RmsNormBackwardBF16(const Context& ctx, const RmsNormBackwardParams& p) {
  const RowView rows = RowView::Contiguous(p.N * p.C), channels = RowView::Contiguous(p.C);
  const F32Twin x(ctx, p.dtype, p.x, rows, Use::kInput), w(ctx, p.dtype, p.weight, channels, Use::kInput);
  const F32Twin dout(ctx, p.dtype, p.dout, rows, Use::kInput), dx(ctx, p.dtype, p.dx, rows, Use::kOutput);
  RmsNormBackwardParams f = p;
  f.dtype = DType::kF32;
  f.x = x.data(), f.weight = w.data(), f.dout = dout.data(), f.dx = dx.data();
  cpu::RmsNormBackward(ctx, f);
  dx.Store(ctx);
}

}  // namespace

void RmsNormForward(const Context& ctx, const RmsNormForwardParams& p) {
  if (p.dtype == DType::kBF16) return RmsNormForwardBF16(ctx, p);
  const float* x = static_cast<const float*>(p.x);
  const float* w = static_cast<const float*>(p.weight);
  float* out = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.N, 3 * p.C, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* xr = x + n * p.C;
      float* yr = out + n * p.C;
      const float ms = vec::Dot(xr, xr, p.C) / static_cast<float>(p.C);
      const float rstd = 1.0f / std::sqrt(ms + p.eps);
      if (p.rstd != nullptr) p.rstd[n] = rstd;
      for (int64_t c = 0; c < p.C; ++c) yr[c] = xr[c] * rstd * w[c];
    }
  });
}

void RmsNormBackward(const Context& ctx, const RmsNormBackwardParams& p) {
  if (p.dtype == DType::kBF16) return RmsNormBackwardBF16(ctx, p);
  const float* x = static_cast<const float*>(p.x);
  const float* w = static_cast<const float*>(p.weight);
  const float* dout = static_cast<const float*>(p.dout);
  float* dx = static_cast<float*>(p.dx);
  const int64_t chunks = std::min<int64_t>(p.N, std::max(1, ctx.num_threads()));
  std::vector<std::vector<float>> dw(chunks, std::vector<float>(p.dweight ? p.C : 0, 0.0f));
  const int64_t per = (p.N + chunks - 1) / chunks;
  auto work = [&](int64_t chunk) {
    const int64_t begin = chunk * per, end = std::min(p.N, begin + per);
    std::vector<float> g(p.C);
    for (int64_t n = begin; n < end; ++n) {
      const float* xr = x + n * p.C;
      const float* dr = dout + n * p.C;
      const float rstd = p.rstd[n];
      if (p.dweight != nullptr) {
        float* dwr = dw[chunk].data();
        for (int64_t c = 0; c < p.C; ++c) dwr[c] += dr[c] * xr[c] * rstd;
      }
      for (int64_t c = 0; c < p.C; ++c) g[c] = dr[c] * w[c];
      const float mean_gx = vec::Dot(g.data(), xr, p.C) / static_cast<float>(p.C);
      const float k = rstd * rstd * mean_gx;
      float* dxr = dx + n * p.C;
      for (int64_t c = 0; c < p.C; ++c) dxr[c] = rstd * (g[c] - xr[c] * k);
    }
  };
  if (chunks > 1 && p.N * p.C >= (1 << 15)) {
    ctx.pool->RunTasks(chunks, work);
  } else {
    for (int64_t c = 0; c < chunks; ++c) work(c);
  }
  if (p.dweight != nullptr) {
    float* dweight = static_cast<float*>(p.dweight);
    for (int64_t chunk = 0; chunk < chunks; ++chunk) vec::AddInto(dw[chunk].data(), dweight, p.C);
  }
}

// Add then normalise: the sum is stored first, so the statistics come from exactly what residual_out holds
// (bitwise what ResidualForward followed by RmsNormForward gives; in bf16 too: residual_out is rounded first).
void ResidualRmsNormForward(const Context& ctx, const ResidualRmsNormForwardParams& p) {
  ResidualForwardParams add;
  add.dtype = p.dtype;
  add.n = p.N * p.C;
  add.a = p.residual;
  add.b = p.x;
  add.out = p.residual_out;
  cpu::ResidualForward(ctx, add);
  RmsNormForwardParams f;
  f.dtype = p.dtype;
  f.N = p.N;
  f.C = p.C;
  f.eps = p.eps;
  f.x = p.residual_out;
  f.weight = p.weight;
  f.out = p.out;
  f.rstd = p.rstd;
  cpu::RmsNormForward(ctx, f);
}

}  // namespace lmf::kernels::cpu
