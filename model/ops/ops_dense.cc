// model/ops: GEMM and linear layers, norms, activations, embeddings, cross-entropy and the optimizer math.
// Activation gradients are written (=), parameter gradients accumulate (+=).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "dnnl.h"
#include "model/ops/ops.h"
#include "model/ops/simd.h"

namespace lmf::model::ops {
namespace {

// Runs fn(part, begin, end) over `parts` contiguous ranges of [0, n) (one task per thread), for reductions
// that keep one partial result per part.
template <typename Fn>
void ForParts(const Context& ctx, int64_t n, int64_t parts, Fn fn) {
  ctx.pool->RunTasks(parts, [&](int64_t p) { fn(p, n * p / parts, n * (p + 1) / parts); });
}

int64_t NumParts(const Context& ctx, int64_t n, int64_t min_rows) {
  return std::max<int64_t>(1, std::min<int64_t>(ctx.num_threads(), n / std::max<int64_t>(1, min_rows)));
}

// Rows per chunk so that a chunk is at least ~16k elements of work.
int64_t RowChunk(int64_t row_elems) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_elems)); }

}  // namespace

namespace {

void SgemmOneThread(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                    const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // OpenMP's thread count is per calling thread: 1 keeps oneDNN inside this pool thread.
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  const dnnl_status_t status = dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  LMF_CHECK(status == dnnl_success) << "dnnl_sgemm failed with status " << static_cast<int>(status);
}

}  // namespace

// The GEMM runs on ctx.pool, not on OpenMP's threads: C is split into one block of rows or columns per
// pool thread, each computed by a single-threaded dnnl_sgemm. (Letting oneDNN start its own OpenMP team
// next to the pool oversubscribes the cores: OpenMP workers spin after each GEMM while the pool runs the
// elementwise ops.)
void Gemm(const Context& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int64_t threads = ctx.num_threads();
  constexpr int64_t kBlock = 64;  // split on multiples of a register/cache block
  const bool split_rows = m >= n;
  const int64_t extent = split_rows ? m : n;
  const int64_t parts = std::min<int64_t>(threads, (extent + kBlock - 1) / kBlock);
  if (parts <= 1 || 2.0 * m * n * k < 4e6) {
    SgemmOneThread(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int64_t blocks = (extent + kBlock - 1) / kBlock;
  ctx.pool->RunTasks(parts, [&](int64_t p) {
    const int64_t begin = std::min(extent, blocks * p / parts * kBlock);
    const int64_t end = std::min(extent, blocks * (p + 1) / parts * kBlock);
    if (begin >= end) return;
    if (split_rows) {  // rows [begin, end) of op(A) and C
      const float* a_part = trans_a ? a + begin : a + begin * lda;
      SgemmOneThread(ta, tb, end - begin, n, k, alpha, a_part, lda, b, ldb, beta, c + begin * ldc, ldc);
    } else {  // columns [begin, end) of op(B) and C
      const float* b_part = trans_b ? b + begin * ldb : b + begin;
      SgemmOneThread(ta, tb, m, end - begin, k, alpha, a, lda, b_part, ldb, beta, c + begin, ldc);
    }
  });
}

void LinearForward(const Context& ctx, int64_t n, int64_t in, int64_t out, const float* x, int64_t ldx,
                   const float* w, const float* bias, float* y, int64_t ldy, bool accumulate) {
  Gemm(ctx, false, true, n, out, in, 1.0f, x, ldx, w, in, accumulate ? 1.0f : 0.0f, y, ldy);
  if (bias == nullptr) return;
  ctx.pool->ParallelFor(n, RowChunk(out), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) simd::Axpy(1.0f, bias, y + r * ldy, out);
  });
}

void LinearBackward(const Context& ctx, int64_t n, int64_t in, int64_t out, const float* x, int64_t ldx,
                    const float* w, const float* dy, int64_t ldy, float* dx, int64_t lddx, float* dw,
                    float* dbias) {
  if (dx != nullptr) Gemm(ctx, false, false, n, in, out, 1.0f, dy, ldy, w, in, 0.0f, dx, lddx);
  Gemm(ctx, true, false, out, in, n, 1.0f, dy, ldy, x, ldx, 1.0f, dw, in);
  if (dbias == nullptr) return;
  // Column sums, split over column ranges so each thread owns its slice of dbias.
  ctx.pool->ParallelFor(out, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = 0; r < n; ++r) {
      const float* row = dy + r * ldy;
      for (int64_t j = begin; j < end; ++j) dbias[j] += row[j];
    }
  });
}

void LayerNormForward(const Context& ctx, int64_t n, int64_t c, float eps, const float* x, const float* w,
                      const float* b, float* y, float* mean, float* rstd) {
  ctx.pool->ParallelFor(n, RowChunk(c), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * c;
      double sum = 0;
      for (int64_t i = 0; i < c; ++i) sum += xr[i];
      const float mu = static_cast<float>(sum / c);
      double var = 0;
      for (int64_t i = 0; i < c; ++i) var += (xr[i] - mu) * (xr[i] - mu);
      const float rs = static_cast<float>(1.0 / std::sqrt(var / c + eps));
      float* yr = y + r * c;
      for (int64_t i = 0; i < c; ++i) yr[i] = (xr[i] - mu) * rs * w[i] + b[i];
      mean[r] = mu;
      rstd[r] = rs;
    }
  });
}

void LayerNormBackward(const Context& ctx, int64_t n, int64_t c, const float* x, const float* w,
                       const float* mean, const float* rstd, const float* dy, float* dx, float* dw, float* db) {
  const int64_t parts = NumParts(ctx, n, 8);
  std::vector<float> partial(static_cast<size_t>(parts * 2 * c), 0.0f);
  ForParts(ctx, n, parts, [&](int64_t p, int64_t begin, int64_t end) {
    float* pdw = partial.data() + p * 2 * c;
    float* pdb = pdw + c;
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * c;
      const float* dyr = dy + r * c;
      const float mu = mean[r], rs = rstd[r];
      float mean_dnorm = 0, mean_dnorm_xhat = 0;
      for (int64_t i = 0; i < c; ++i) {
        const float xhat = (xr[i] - mu) * rs;
        const float dnorm = dyr[i] * w[i];
        mean_dnorm += dnorm;
        mean_dnorm_xhat += dnorm * xhat;
        pdw[i] += dyr[i] * xhat;
        pdb[i] += dyr[i];
      }
      mean_dnorm /= c;
      mean_dnorm_xhat /= c;
      float* dxr = dx + r * c;
      for (int64_t i = 0; i < c; ++i) {
        const float xhat = (xr[i] - mu) * rs;
        dxr[i] = rs * (dyr[i] * w[i] - mean_dnorm - xhat * mean_dnorm_xhat);
      }
    }
  });
  for (int64_t p = 0; p < parts; ++p) {
    for (int64_t i = 0; i < c; ++i) {
      dw[i] += partial[p * 2 * c + i];
      db[i] += partial[p * 2 * c + c + i];
    }
  }
}

void RmsNormForward(const Context& ctx, int64_t n, int64_t c, float eps, const float* x, const float* w, float* y,
                    float* rstd) {
  ctx.pool->ParallelFor(n, RowChunk(c), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * c;
      const float rs = 1.0f / std::sqrt(simd::Dot(xr, xr, c) / c + eps);
      float* yr = y + r * c;
      for (int64_t i = 0; i < c; ++i) yr[i] = xr[i] * rs * w[i];
      rstd[r] = rs;
    }
  });
}

void RmsNormBackward(const Context& ctx, int64_t n, int64_t c, const float* x, const float* w, const float* rstd,
                     const float* dy, float* dx, float* dw) {
  const int64_t parts = NumParts(ctx, n, 8);
  std::vector<float> partial(static_cast<size_t>(parts * c), 0.0f);
  ForParts(ctx, n, parts, [&](int64_t p, int64_t begin, int64_t end) {
    float* pdw = partial.data() + p * c;
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * c;
      const float* dyr = dy + r * c;
      const float rs = rstd[r];
      float mean_dnorm_xhat = 0;
      for (int64_t i = 0; i < c; ++i) {
        const float xhat = xr[i] * rs;
        mean_dnorm_xhat += dyr[i] * w[i] * xhat;
        pdw[i] += dyr[i] * xhat;
      }
      mean_dnorm_xhat /= c;
      float* dxr = dx + r * c;
      for (int64_t i = 0; i < c; ++i) dxr[i] = rs * (dyr[i] * w[i] - xr[i] * rs * mean_dnorm_xhat);
    }
  });
  for (int64_t p = 0; p < parts; ++p) {
    for (int64_t i = 0; i < c; ++i) dw[i] += partial[p * c + i];
  }
}

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

inline float Gelu(float x) {
  return 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + 0.044715f * x * x * x)));
}
inline float GeluGrad(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  const float th = std::tanh(u);
  const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}
inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

namespace {

// GELU-tanh for 8 lanes: tanh(u) = 1 - 2 / (exp(2u) + 1), with the vectorised exp.
inline __m256 GeluVec(__m256 x, __m256* grad) {
  const __m256 c = _mm256_set1_ps(kGeluScale), a = _mm256_set1_ps(0.044715f), one = _mm256_set1_ps(1.0f);
  const __m256 half = _mm256_set1_ps(0.5f), two = _mm256_set1_ps(2.0f);
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 u = _mm256_mul_ps(c, _mm256_fmadd_ps(_mm256_mul_ps(a, x2), x, x));
  const __m256 e = simd::Exp(_mm256_mul_ps(two, u));
  const __m256 th = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(e, one)));
  if (grad != nullptr) {
    const __m256 du = _mm256_mul_ps(c, _mm256_fmadd_ps(_mm256_set1_ps(3.0f * 0.044715f), x2, one));
    const __m256 sech2 = _mm256_fnmadd_ps(th, th, one);
    *grad = _mm256_fmadd_ps(half, _mm256_add_ps(one, th), _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_mul_ps(sech2, du)));
  }
  return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, th));
}

}  // namespace

void ActivationForward(const Context& ctx, Activation act, int64_t n, int64_t f, const float* x, int64_t ldx,
                       float* y) {
  ctx.pool->ParallelFor(n, RowChunk(f), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * ldx;
      float* yr = y + r * f;
      int64_t i = 0;
      if (act == Activation::kGelu) {
        for (; i + 8 <= f; i += 8) _mm256_storeu_ps(yr + i, GeluVec(_mm256_loadu_ps(xr + i), nullptr));
        for (; i < f; ++i) yr[i] = Gelu(xr[i]);
      } else {
        for (; i < f; ++i) yr[i] = xr[i] > 0 ? xr[i] : 0.0f;
      }
    }
  });
}

void ActivationBackward(const Context& ctx, Activation act, int64_t n, int64_t f, const float* x, int64_t ldx,
                        const float* dy, float* dx, int64_t lddx) {
  ctx.pool->ParallelFor(n, RowChunk(f), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * ldx;
      const float* dyr = dy + r * f;
      float* dxr = dx + r * lddx;
      int64_t i = 0;
      if (act == Activation::kGelu) {
        for (; i + 8 <= f; i += 8) {
          __m256 grad;
          GeluVec(_mm256_loadu_ps(xr + i), &grad);
          _mm256_storeu_ps(dxr + i, _mm256_mul_ps(_mm256_loadu_ps(dyr + i), grad));
        }
        for (; i < f; ++i) dxr[i] = dyr[i] * GeluGrad(xr[i]);
      } else {
        for (; i < f; ++i) dxr[i] = xr[i] > 0 ? dyr[i] : 0.0f;
      }
    }
  });
}

void SwiGluForward(const Context& ctx, int64_t n, int64_t f, const float* gate, const float* up, int64_t ld,
                   float* y) {
  ctx.pool->ParallelFor(n, RowChunk(f), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gate + r * ld;
      const float* u = up + r * ld;
      float* yr = y + r * f;
      for (int64_t i = 0; i < f; ++i) yr[i] = g[i] * Sigmoid(g[i]) * u[i];
    }
  });
}

void SwiGluBackward(const Context& ctx, int64_t n, int64_t f, const float* gate, const float* up, int64_t ld,
                    const float* dy, float* dgate, float* dup, int64_t ldd) {
  ctx.pool->ParallelFor(n, RowChunk(f), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gate + r * ld;
      const float* u = up + r * ld;
      const float* dyr = dy + r * f;
      float* dg = dgate + r * ldd;
      float* du = dup + r * ldd;
      for (int64_t i = 0; i < f; ++i) {
        const float s = Sigmoid(g[i]);
        const float silu = g[i] * s;
        du[i] = dyr[i] * silu;
        dg[i] = dyr[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
      }
    }
  });
}

void EmbeddingForward(const Context& ctx, int64_t n, int64_t c, const int32_t* ids, const float* table, float* x) {
  ctx.pool->ParallelFor(n, RowChunk(c), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) std::copy_n(table + static_cast<int64_t>(ids[r]) * c, c, x + r * c);
  });
}

void EmbeddingBackward(const Context& ctx, int64_t n, int64_t c, const int32_t* ids, const float* dx,
                       float* dtable) {
  // Each thread owns a range of channels of every row, so repeated ids never race.
  ctx.pool->ParallelFor(c, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = 0; r < n; ++r) {
      float* dst = dtable + static_cast<int64_t>(ids[r]) * c;
      const float* src = dx + r * c;
      for (int64_t i = begin; i < end; ++i) dst[i] += src[i];
    }
  });
}

double CrossEntropyForward(const Context& ctx, int64_t n, int64_t v, const float* logits, const int32_t* targets,
                           float* lse) {
  const int64_t parts = NumParts(ctx, n, 1);
  std::vector<double> partial(static_cast<size_t>(parts), 0.0);
  ForParts(ctx, n, parts, [&](int64_t p, int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(v));
    for (int64_t r = begin; r < end; ++r) {
      const float* row = logits + r * v;
      const float mx = simd::Max(row, v);
      const float sum = simd::ExpShiftedSum(row, mx, scratch.data(), v);
      lse[r] = mx + std::log(sum);
      partial[p] += static_cast<double>(lse[r]) - row[targets[r]];
    }
  });
  double total = 0;
  for (double x : partial) total += x;
  return total / static_cast<double>(n);
}

void CrossEntropyBackward(const Context& ctx, int64_t n, int64_t v, const int32_t* targets, const float* lse,
                          float* logits) {
  const float scale = 1.0f / static_cast<float>(n);
  ctx.pool->ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = logits + r * v;
      simd::ExpShiftedSum(row, lse[r], row, v);
      const __m256 vs = _mm256_set1_ps(scale);
      int64_t i = 0;
      for (; i + 8 <= v; i += 8) _mm256_storeu_ps(row + i, _mm256_mul_ps(_mm256_loadu_ps(row + i), vs));
      for (; i < v; ++i) row[i] *= scale;
      row[targets[r]] -= scale;
    }
  });
}

double SumOfSquares(const Context& ctx, int64_t n, const float* x) {
  const int64_t parts = NumParts(ctx, n, 1 << 16);
  std::vector<double> partial(static_cast<size_t>(parts), 0.0);
  ForParts(ctx, n, parts, [&](int64_t p, int64_t begin, int64_t end) {
    double sum = 0;
    for (int64_t i = begin; i < end; i += 4096) {
      const int64_t len = std::min<int64_t>(4096, end - i);
      sum += simd::Dot(x + i, x + i, len);
    }
    partial[p] = sum;
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void Scale(const Context& ctx, int64_t n, float scale, float* x) {
  ctx.pool->ParallelFor(n, 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] *= scale;
  });
}

void AdamWUpdate(const Context& ctx, const AdamWHyper& h, int64_t n, float* p, const float* g, float* m, float* v) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
  const float step_size = static_cast<float>(h.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - h.lr * h.weight_decay;
  const __m256 b1 = _mm256_set1_ps(h.beta1), b2 = _mm256_set1_ps(h.beta2);
  const __m256 one_b1 = _mm256_set1_ps(1.0f - h.beta1), one_b2 = _mm256_set1_ps(1.0f - h.beta2);
  const __m256 vstep = _mm256_set1_ps(step_size), vinv = _mm256_set1_ps(inv_sqrt_bc2);
  const __m256 veps = _mm256_set1_ps(h.eps), vdecay = _mm256_set1_ps(decay);
  ctx.pool->ParallelFor(n, 1 << 15, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      const __m256 gi = _mm256_loadu_ps(g + i);
      const __m256 mi = _mm256_fmadd_ps(b1, _mm256_loadu_ps(m + i), _mm256_mul_ps(one_b1, gi));
      const __m256 vi = _mm256_fmadd_ps(b2, _mm256_loadu_ps(v + i), _mm256_mul_ps(one_b2, _mm256_mul_ps(gi, gi)));
      const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(vi), vinv, veps);
      const __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), vdecay);
      _mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_div_ps(_mm256_mul_ps(vstep, mi), denom)));
      _mm256_storeu_ps(m + i, mi);
      _mm256_storeu_ps(v + i, vi);
    }
    for (; i < end; ++i) {
      m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g[i];
      v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * g[i] * g[i];
      p[i] = p[i] * decay - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + h.eps);
    }
  });
}

}  // namespace lmf::model::ops
