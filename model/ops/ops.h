// The CPU compute under model/'s modules: GEMM (oneDNN sgemm), norms, activations, RoPE, causal attention
// with grouped key/value heads, embeddings, fused softmax cross-entropy, AdamW and the global grad norm.
//
// A stopgap until the matching kernels/<op> packages are committed (see /work/notes/requests_from_model.md):
// model/ then calls those and this package goes away. Plain pointers with explicit row strides (ld*, in
// elements); rows are tokens (N = B*T). Activation gradients are written (=); parameter gradients
// accumulate (+=). Work is split over ctx.pool.
#ifndef LMFORGE_MODEL_OPS_OPS_H_
#define LMFORGE_MODEL_OPS_OPS_H_

#include <cstdint>

#include "kernels/core/context.h"

namespace lmf::model::ops {

using kernels::Context;

// C (M, N) = alpha * op(A) op(B) + beta * C, row-major; op(X) = X or X^T by trans_*. Split into row or
// column blocks over ctx.pool, each a single-threaded oneDNN sgemm.
void Gemm(const Context& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Linear layer, torch layout W (OUT, IN): y (N, OUT) = x (N, IN) W^T + bias (bias may be null). With
// accumulate, y += instead of y =.
void LinearForward(const Context& ctx, int64_t n, int64_t in, int64_t out, const float* x, int64_t ldx,
                   const float* w, const float* bias, float* y, int64_t ldy, bool accumulate);
// dx (N, IN) = dy W (skipped when dx is null); dw (OUT, IN) += dy^T x; dbias (OUT) += sum over rows of dy.
void LinearBackward(const Context& ctx, int64_t n, int64_t in, int64_t out, const float* x, int64_t ldx,
                    const float* w, const float* dy, int64_t ldy, float* dx, int64_t lddx, float* dw,
                    float* dbias);

// Norms over rows of C. LayerNorm saves mean and rstd (N each), RMSNorm rstd (N). bias / mean may be null
// for RMSNorm. Backward: dx written, dw (and db) accumulated.
void LayerNormForward(const Context& ctx, int64_t n, int64_t c, float eps, const float* x, const float* w,
                      const float* b, float* y, float* mean, float* rstd);
void LayerNormBackward(const Context& ctx, int64_t n, int64_t c, const float* x, const float* w,
                       const float* mean, const float* rstd, const float* dy, float* dx, float* dw, float* db);
void RmsNormForward(const Context& ctx, int64_t n, int64_t c, float eps, const float* x, const float* w, float* y,
                    float* rstd);
void RmsNormBackward(const Context& ctx, int64_t n, int64_t c, const float* x, const float* w, const float* rstd,
                     const float* dy, float* dx, float* dw);

// Elementwise activations over N rows of F (input rows at stride ldx). GELU is the tanh approximation.
enum class Activation { kGelu, kRelu };
void ActivationForward(const Context& ctx, Activation act, int64_t n, int64_t f, const float* x, int64_t ldx,
                       float* y);
// dx = dy * act'(x).
void ActivationBackward(const Context& ctx, Activation act, int64_t n, int64_t f, const float* x, int64_t ldx,
                        const float* dy, float* dx, int64_t lddx);
// SwiGLU: y = silu(gate) * up, gate and up rows at stride ld (they may be halves of one buffer).
void SwiGluForward(const Context& ctx, int64_t n, int64_t f, const float* gate, const float* up, int64_t ld,
                   float* y);
void SwiGluBackward(const Context& ctx, int64_t n, int64_t f, const float* gate, const float* up, int64_t ld,
                    const float* dy, float* dgate, float* dup, int64_t ldd);

// RoPE in place on x (B, T, heads, HS) with token row stride ld: pairs (2i, 2i+1) of each head at position
// t rotate by t * theta^(-2i/HS). `inverse` rotates back (the backward of the rotation).
void Rope(const Context& ctx, int64_t b, int64_t t, int64_t heads, int64_t hs, double theta, float* x,
          int64_t ld, bool inverse);

// Causal attention. q (B, T, NH, HS) rows at stride ldq; k, v (B, T, NKV, HS) at stride ldkv; query head h
// reads key/value head h / (NH / NKV). out (B, T, NH, HS) dense; lse (B, NH, T) saved for the backward.
struct AttentionShape {
  int64_t b, t, nh, nkv, hs;
};
void AttentionForward(const Context& ctx, const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                      const float* v, int64_t ldkv, float* out, float* lse);
// dq, dk, dv written (same layouts and strides as q, k, v).
void AttentionBackward(const Context& ctx, const AttentionShape& s, const float* q, int64_t ldq, const float* k,
                       const float* v, int64_t ldkv, const float* out, const float* lse, const float* dout,
                       float* dq, float* dk, float* dv);

// x (N, C) = table[ids[n]] (rows of C).
void EmbeddingForward(const Context& ctx, int64_t n, int64_t c, const int32_t* ids, const float* table, float* x);
// dtable[ids[n]] += dx[n].
void EmbeddingBackward(const Context& ctx, int64_t n, int64_t c, const int32_t* ids, const float* dx,
                       float* dtable);

// Softmax cross-entropy per row of logits (N, V): loss[n] = lse[n] - logits[n, target[n]]; returns the mean
// and keeps lse (N).
double CrossEntropyForward(const Context& ctx, int64_t n, int64_t v, const float* logits, const int32_t* targets,
                           float* lse);
// In place: logits[n] becomes d(mean loss)/dlogits[n] = (softmax - onehot) / N.
void CrossEntropyBackward(const Context& ctx, int64_t n, int64_t v, const int32_t* targets, const float* lse,
                          float* logits);

// Sum of squares of x (double accumulation).
double SumOfSquares(const Context& ctx, int64_t n, const float* x);
// x *= scale.
void Scale(const Context& ctx, int64_t n, float scale, float* x);
// torch.optim.AdamW's update for one tensor at step `step` (1-based): p *= 1 - lr*wd; m, v moments;
// p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps).
struct AdamWHyper {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;
};
void AdamWUpdate(const Context& ctx, const AdamWHyper& h, int64_t n, float* p, const float* g, float* m, float* v);

}  // namespace lmf::model::ops

#endif  // LMFORGE_MODEL_OPS_OPS_H_
