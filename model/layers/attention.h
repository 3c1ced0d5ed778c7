// Attention: causal self-attention with n_kv_heads key/value heads (MHA when n_kv_heads == n_heads, GQA
// when it divides n_heads, MQA when 1) in one module, with optional QK-norm and RoPE on q and k.
//
// q, k and v come from one fused (NH*HS + 2*NKV*HS, C) projection whose row blocks are visited as
// attn.q_proj / attn.k_proj / attn.v_proj (and their biases), so a single GEMM computes all three.
// Step state: the projected q|k|v (N, (NH+2*NKV)*HS) after RoPE and the attention output (N, NH*HS) in the
// activation dtype, and the fp32 log-sum-exp (B, NH, T), on the model's device. QK-norm (config.qk_norm)
// norms each head's q and k before RoPE: the q (k) heads are gathered into a contiguous (N*NH, HS) input,
// normed by a Norm of HS channels ("q_norm", "k_norm") and written back into q|k|v; the gathered inputs and
// the norms' outputs and statistics are step state too. Forward adds the output
// projection into the residual stream (or writes it, for a block that norms the branch first); Backward takes
// the residual gradient and writes the gradient of the normed input. Parameter gradients (fp32) accumulate.
//
// Incremental decoding (inference only): Forward with a LayerKvCache also writes each sequence's post-RoPE
// keys and its values of positions [0, T) into the cache (a prefill; a ring keeps the last W); Decode runs
// one new token per sequence at a position shared by the batch: projects q|k|v, rotates q and k at that
// position, writes k and v into that position's row of the cache and attends over positions [0, position]
// (T = 1 query, S = position + 1 keys, no mask: every cached key is at or before the query; with a sliding
// window W, over positions (position - W, position] only: once a ring has wrapped, all of its W rows, in
// ring order, which a softmax over one query does not see).
// Decode uses the same step-state buffers as Forward, sized for (B, 1), so it replaces the step state:
// Backward needs a new Forward after it.
#ifndef LMFORGE_MODEL_LAYERS_ATTENTION_H_
#define LMFORGE_MODEL_LAYERS_ATTENTION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "kernels/attention/attention.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/linear.h"
#include "model/layers/norm.h"
#include "model/layers/parameter.h"

namespace lmf::model {

// One layer's key/value cache, in the activation dtype on the model's device. k, v: (B, R, NKV, HS)
// contiguous, R rows per sequence holding the post-RoPE keys and the values of the tokens seen: position p in
// row p % R. R = S_max (the context), or for a layer with a sliding window W < S_max a ring of W rows: the
// only keys a query can still see are the last W.
struct LayerKvCache {
  kernels::Tensor k;
  kernels::Tensor v;
};

class Attention {
 public:
  // Parameters on ctx's device; activations of type `dtype`.
  Attention(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype, StepCounters* counters);

  // h (B*T, C) normed input; out (B*T, C) += attention(h) W_o^T + b_o (= when !accumulate). With `cache`
  // (B matching, S_max >= T), also writes the keys and values of positions [0, T) into it.
  void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out, bool accumulate,
               LayerKvCache* cache = nullptr);
  // One token per sequence at `position` (< S_max; rows [0, position) of the cache filled): h (B, C)
  // normed input; out (B, C) += attention over the cache W_o^T + b_o (= when !accumulate). `device_position`
  // points to one int32 equal to `position` on the model's device (RoPE reads the position there).
  void Decode(const kernels::Context& ctx, int64_t b, int64_t position, const int32_t* device_position,
              const void* h, void* out, bool accumulate, LayerKvCache& cache);
  // dresidual (B*T, C) -> dh (B*T, C) written.
  void Backward(const kernels::Context& ctx, const BackwardWorkspace& ws, const void* dresidual, void* dh);

  int64_t saved_bytes() const;
  // Visits "<prefix>.q_proj.*", "k_proj", "v_proj", ("q_norm", "k_norm": QK-norm only), "output_proj".
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const;

 private:
  // The kernel's view of the step state: q, k, v in place in the fused buffer, the output, the lse.
  kernels::AttentionParams Params() const;
  // Sizes the step state for (B, T) (reallocating when the shape changes).
  void EnsureStepState(const kernels::Context& ctx, int64_t b, int64_t t);
  // Copies the keys and values of the (B, T) step state into cache rows [0, T) (a row gather per sequence).
  void FillCache(const kernels::Context& ctx, LayerKvCache& cache);
  // QK-norm of the n rows of the q|k|v buffer qkv_out_ (a no-op without it), forward and backward over the
  // gradient rows dqkv (ws.dattn and ws.dqk_norm as scratch).
  void NormQk(const kernels::Context& ctx, int64_t n);
  void NormQkBackward(const kernels::Context& ctx, const BackwardWorkspace& ws, void* dqkv);

  int64_t nh_, nkv_, hs_, c_;
  int64_t window_;  // sliding window (0: none)
  float softcap_;   // logit soft-cap (0: none)
  bool rope_;
  double rope_theta_;
  kernels::DType dtype_;
  Linear qkv_, output_;
  std::optional<Norm> q_norm_, k_norm_;  // QK-norm only
  StepCounters* counters_;
  // Step state.
  int64_t b_ = 0, t_ = 0;
  const void* input_ = nullptr;
  kernels::Tensor qkv_out_, attn_out_, lse_;
  kernels::Tensor q_in_, k_in_;  // QK-norm: the gathered q (N*NH, HS) and k (N*NKV, HS) heads before it
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_ATTENTION_H_
