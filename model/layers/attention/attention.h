// Attention: the softmax-attention token mixer. Causal self-attention with n_kv_heads key/value heads (MHA
// when n_kv_heads == n_heads, GQA when it divides n_heads, MQA when 1), with an optional sliding window,
// logit soft-cap, QK-norm and RoPE on q and k (AttentionSpec in model/config/config.h).
//
// q, k and v come from one fused (NH*HS + 2*NKV*HS, C) projection whose row blocks are visited as
// attn.q_proj / attn.k_proj / attn.v_proj (and their biases), so a single GEMM computes all three.
// Saved for the backward (AttentionActivations): the projected q|k|v (N, (NH+2*NKV)*HS) after RoPE and the
// attention output (N, NH*HS) in the activation dtype, and the fp32 log-sum-exp (B, NH, T). QK-norm norms
// each head's q and k before RoPE: the q (k) heads are gathered into a contiguous (N*NH, HS) input, normed
// by a Norm of HS channels ("q_norm", "k_norm") and written back into q|k|v; the gathered inputs and the
// norms' outputs and statistics are saved too.
//
// Incremental decoding: the decode state is a KV cache (AttentionCache): per sequence the post-RoPE keys and
// the values, position p in row p % R, R the context or, for a window W shorter than it, a ring of W rows
// (the only keys a query can still see). Forward with the cache as `fill` writes positions [0, T) (a
// prefill); Decode runs one new token per sequence at a position shared by the batch: projects q|k|v,
// rotates q and k at that position, writes k and v into that position's row and attends over positions
// [0, position] (T = 1 query, S = position + 1 keys, no mask: every cached key is at or before the query;
// with a window, over positions (position - W, position] only: once a ring has wrapped, all of its W rows,
// in ring order, which a softmax over one query does not see).
#ifndef LMFORGE_MODEL_LAYERS_ATTENTION_ATTENTION_H_
#define LMFORGE_MODEL_LAYERS_ATTENTION_ATTENTION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "kernels/attention/attention.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/layer.h"
#include "model/layers/linear/linear.h"
#include "model/layers/norm/norm.h"
#include "model/layers/parameter.h"

namespace lmf::model {

// What the attention of one micro-batch keeps for its backward.
struct AttentionActivations : LayerActivations {
  int64_t b = 0, t = 0;
  kernels::Tensor qkv;   // (N, (NH+2*NKV)*HS) after QK-norm and RoPE
  kernels::Tensor out;   // (N, NH*HS) the attention output
  kernels::Tensor lse;   // (B, NH, T) fp32
  kernels::Tensor q_in, k_in;         // QK-norm: the gathered q (N*NH, HS) and k (N*NKV, HS) heads before it
  NormActivations q_norm, k_norm;     // QK-norm

  int64_t bytes() const override;
  void Release() override;
};

// The KV cache of one attention layer: k, v (B, R, NKV, HS) contiguous in the activation dtype on the
// model's device, position p in row p % R.
struct AttentionCache : DecodeState {
  kernels::Tensor k, v;
  int64_t bytes() const override { return static_cast<int64_t>(k.nbytes() + v.nbytes()); }
};

class Attention final : public TokenMixer {
 public:
  // Parameters on ctx's device; activations of type `dtype`. The model supplies d_model, biases, the
  // position scheme (RoPE and its theta) and the norm kind and eps for QK-norm.
  Attention(const AttentionSpec& spec, const ModelConfig& model, const kernels::Context& ctx,
            kernels::DType dtype, StepCounters* counters);

  std::unique_ptr<LayerActivations> NewActivations() const override;
  void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out, bool accumulate,
               LayerActivations& saved, DecodeState* fill = nullptr) const override;
  void Backward(const kernels::Context& ctx, const void* h, const LayerActivations& saved, const void* dout,
                void* dh, Scratch& scratch) const override;
  int64_t DecodeStateBytes(int64_t b, int64_t max_positions) const override;
  std::unique_ptr<DecodeState> NewDecodeState(const kernels::Context& ctx, int64_t b,
                                              int64_t max_positions) const override;
  void Decode(const kernels::Context& ctx, int64_t b, int64_t position, const int32_t* device_position,
              const void* h, void* out, bool accumulate, DecodeState& state,
              LayerActivations& scratch_saved) const override;
  // Visits "<prefix>.q_proj.*", "k_proj", "v_proj", ("q_norm", "k_norm": QK-norm only), "output_proj".
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const override;

  // What a layer of this spec costs, from the config alone (model/accounting sums these over the layers).
  static int64_t Parameters(const AttentionSpec& spec, const ModelConfig& model);
  static double MatmulFlopsPerToken(const AttentionSpec& spec, const ModelConfig& model);  // forward
  // Q K^T and P V over the causal triangle (the window's band), forward, per token of a length-t sequence.
  static double AttentionFlopsPerToken(const AttentionSpec& spec, const ModelConfig& model, int64_t t);
  static int64_t SavedBytesPerToken(const AttentionSpec& spec, const ModelConfig& model, kernels::DType dtype);
  // Whether ctx's device runs this spec with `dtype` activations (its head size, its kernels); an error
  // names what it lacks.
  static absl::Status CheckSupport(const AttentionSpec& spec, const ModelConfig& model, kernels::Device device,
                                   kernels::DType dtype);

 private:
  // The kernel's view of `saved`: q, k, v in place in the fused buffer, the output, the lse.
  kernels::AttentionParams Params(const AttentionActivations& saved) const;
  // Sizes `saved` for (B, T) (reallocating when the shape changes).
  void Resize(const kernels::Context& ctx, int64_t b, int64_t t, AttentionActivations& saved) const;
  // Copies the keys and values of `saved` (B, T) into cache rows [0, T) (a row gather per sequence).
  void FillCache(const kernels::Context& ctx, const AttentionActivations& saved, AttentionCache& cache) const;
  // QK-norm of the n rows of saved.qkv (a no-op without it), forward and backward over the gradient rows
  // dqkv.
  void NormQk(const kernels::Context& ctx, int64_t n, AttentionActivations& saved) const;
  void NormQkBackward(const kernels::Context& ctx, const AttentionActivations& saved, void* dqkv,
                      Scratch& scratch) const;
  int64_t CacheRows(int64_t max_positions) const;

  int64_t nh_, nkv_, hs_, c_;
  int64_t window_;  // sliding window (0: none)
  float softcap_;   // logit soft-cap (0: none)
  bool rope_;
  double rope_theta_;
  kernels::DType dtype_;
  Linear qkv_, output_;
  std::optional<Norm> q_norm_, k_norm_;  // QK-norm only
  StepCounters* counters_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_ATTENTION_ATTENTION_H_
