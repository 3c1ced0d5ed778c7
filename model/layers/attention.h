// Attention: causal self-attention with n_kv_heads key/value heads (MHA when n_kv_heads == n_heads, GQA
// when it divides n_heads, MQA when 1) in one module, with optional RoPE on q and k.
//
// q, k and v come from one fused (NH*HS + 2*NKV*HS, C) projection whose row blocks are visited as
// attn.q_proj / attn.k_proj / attn.v_proj (and their biases), so a single GEMM computes all three.
// Step state: the projected q|k|v (N, (NH+2*NKV)*HS) after RoPE and the attention output (N, NH*HS) in the
// activation dtype, and the fp32 log-sum-exp (B, NH, T), on the model's device. Forward adds the output
// projection into the residual stream; Backward takes the residual gradient and writes the gradient of the
// normed input. Parameter gradients (fp32) accumulate.
#ifndef LMFORGE_MODEL_LAYERS_ATTENTION_H_
#define LMFORGE_MODEL_LAYERS_ATTENTION_H_

#include <cstdint>
#include <string>

#include "kernels/attention/attention.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/linear.h"
#include "model/layers/parameter.h"

namespace lmf::model {

class Attention {
 public:
  // Parameters on ctx's device; activations of type `dtype`.
  Attention(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype, StepCounters* counters);

  // h (B*T, C) normed input; residual (B*T, C) += attention(h) W_o^T + b_o.
  void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* residual);
  // dresidual (B*T, C) -> dh (B*T, C) written.
  void Backward(const kernels::Context& ctx, const BackwardWorkspace& ws, const void* dresidual, void* dh);

  int64_t saved_bytes() const;
  // Visits "<prefix>.q_proj.*", "k_proj", "v_proj", "output_proj".
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const;

 private:
  // The kernel's view of the step state: q, k, v in place in the fused buffer, the output, the lse.
  kernels::AttentionParams Params() const;

  int64_t nh_, nkv_, hs_, c_;
  bool rope_;
  double rope_theta_;
  kernels::DType dtype_;
  Linear qkv_, output_;
  StepCounters* counters_;
  // Step state.
  int64_t b_ = 0, t_ = 0;
  const void* input_ = nullptr;
  kernels::Tensor qkv_out_, attn_out_, lse_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_ATTENTION_H_
