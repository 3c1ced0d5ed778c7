// CPU LayerNorm: two-pass mean and variance per row (stable), rows split over threads. The backward
// computes dx row by row and the weight/bias gradients per thread, summed at the end in a fixed order.
//   xhat = (x - mean) * rstd;  g = dout * w
//   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
#include <cmath>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/residual/residual.h"

namespace lmf::kernels::cpu {
namespace {

using Use = F32Twin::Use;

// bf16 (x, weight, bias, out, dout, dx in bf16; mean, rstd, dweight, dbias fp32): the fp32 kernels on fp32
// twins.
void LayerNormForwardBF16(const Context& ctx, const LayerNormForwardParams& p) {
  const RowView rows = RowView::Contiguous(p.N * p.C), channels = RowView::Contiguous(p.C);
  const F32Twin x(ctx, p.dtype, p.x, rows, Use::kInput), w(ctx, p.dtype, p.weight, channels, Use::kInput);
  const F32Twin bias(ctx, p.dtype, p.bias, channels, Use::kInput), out(ctx, p.dtype, p.out, rows, Use::kOutput);
  LayerNormForwardParams f = p;
  f.dtype = DType::kF32;
  f.x = x.data(), f.weight = w.data(), f.bias = bias.data(), f.out = out.data();
  cpu::LayerNormForward(ctx, f);
  out.Store(ctx);
}

void LayerNormBackwardBF16(const Context& ctx, const LayerNormBackwardParams& p) {
  const RowView rows = RowView::Contiguous(p.N * p.C), channels = RowView::Contiguous(p.C);
  const F32Twin x(ctx, p.dtype, p.x, rows, Use::kInput), w(ctx, p.dtype, p.weight, channels, Use::kInput);
  const F32Twin dout(ctx, p.dtype, p.dout, rows, Use::kInput), dx(ctx, p.dtype, p.dx, rows, Use::kOutput);
  LayerNormBackwardParams f = p;
  f.dtype = DType::kF32;
  f.x = x.data(), f.weight = w.data(), f.dout = dout.data(), f.dx = dx.data();
  cpu::LayerNormBackward(ctx, f);
  dx.Store(ctx);
}

}  // namespace

void LayerNormForward(const Context& ctx, const LayerNormForwardParams& p) {
  if (p.dtype == DType::kBF16) return LayerNormForwardBF16(ctx, p);
  const float* x = static_cast<const float*>(p.x);
  const float* w = static_cast<const float*>(p.weight);
  const float* b = static_cast<const float*>(p.bias);
  float* out = static_cast<float*>(p.out);
  ParallelForItems(ctx, p.N, 4 * p.C, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* xr = x + n * p.C;
      float* yr = out + n * p.C;
      const float mean = vec::Sum(xr, p.C) / static_cast<float>(p.C);
      const float var = vec::SumSquaredDeviation(xr, mean, p.C);
      const float rstd = 1.0f / std::sqrt(var / static_cast<float>(p.C) + p.eps);
      if (p.mean != nullptr) p.mean[n] = mean;
      if (p.rstd != nullptr) p.rstd[n] = rstd;
      if (b != nullptr) {
        for (int64_t c = 0; c < p.C; ++c) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
      } else {
        for (int64_t c = 0; c < p.C; ++c) yr[c] = (xr[c] - mean) * rstd * w[c];
      }
    }
  });
}

void LayerNormBackward(const Context& ctx, const LayerNormBackwardParams& p) {
  if (p.dtype == DType::kBF16) return LayerNormBackwardBF16(ctx, p);
  const float* x = static_cast<const float*>(p.x);
  const float* w = static_cast<const float*>(p.weight);
  const float* dout = static_cast<const float*>(p.dout);
  float* dx = static_cast<float*>(p.dx);
  const int64_t chunks = std::min<int64_t>(p.N, std::max(1, ctx.num_threads()));
  std::vector<std::vector<float>> dw(chunks, std::vector<float>(p.dweight ? p.C : 0, 0.0f));
  std::vector<std::vector<float>> db(chunks, std::vector<float>(p.dbias ? p.C : 0, 0.0f));
  const int64_t per = (p.N + chunks - 1) / chunks;
  auto work = [&](int64_t chunk) {
    const int64_t begin = chunk * per, end = std::min(p.N, begin + per);
    std::vector<float> xhat(p.C), g(p.C);
    for (int64_t n = begin; n < end; ++n) {
      const float* xr = x + n * p.C;
      const float* dr = dout + n * p.C;
      const float mean = p.mean[n], rstd = p.rstd[n];
      for (int64_t c = 0; c < p.C; ++c) {
        xhat[c] = (xr[c] - mean) * rstd;
        g[c] = dr[c] * w[c];
      }
      if (p.dweight != nullptr) {
        float* dwr = dw[chunk].data();
        for (int64_t c = 0; c < p.C; ++c) dwr[c] += dr[c] * xhat[c];
      }
      if (p.dbias != nullptr) vec::AddInto(dr, db[chunk].data(), p.C);
      const float inv_c = 1.0f / static_cast<float>(p.C);
      const float mean_g = vec::Sum(g.data(), p.C) * inv_c;
      const float mean_gx = vec::Dot(g.data(), xhat.data(), p.C) * inv_c;
      float* dxr = dx + n * p.C;
      for (int64_t c = 0; c < p.C; ++c) dxr[c] = rstd * (g[c] - mean_g - xhat[c] * mean_gx);
    }
  };
  if (chunks > 1 && p.N * p.C >= (1 << 15)) {
    ctx.pool->RunTasks(chunks, work);
  } else {
    for (int64_t c = 0; c < chunks; ++c) work(c);
  }
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    if (p.dweight != nullptr) vec::AddInto(dw[chunk].data(), static_cast<float*>(p.dweight), p.C);
    if (p.dbias != nullptr) vec::AddInto(db[chunk].data(), static_cast<float*>(p.dbias), p.C);
  }
}

// Add then normalise: the sum is stored first, so the statistics come from exactly what residual_out holds
// (bitwise what ResidualForward followed by LayerNormForward gives).
void ResidualLayerNormForward(const Context& ctx, const ResidualLayerNormForwardParams& p) {
  ResidualForwardParams add;
  add.dtype = p.dtype;
  add.n = p.N * p.C;
  add.a = p.residual;
  add.b = p.x;
  add.out = p.residual_out;
  cpu::ResidualForward(ctx, add);
  LayerNormForwardParams f;
  f.dtype = p.dtype;
  f.N = p.N;
  f.C = p.C;
  f.eps = p.eps;
  f.x = p.residual_out;
  f.weight = p.weight;
  f.out = p.out;
  f.bias = p.bias;
  f.mean = p.mean;
  f.rstd = p.rstd;
  cpu::LayerNormForward(ctx, f);
}

}  // namespace lmf::kernels::cpu
