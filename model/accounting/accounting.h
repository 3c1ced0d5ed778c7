// Accounting for any ModelConfig: parameter counts, training FLOPs per token and the activation memory
// the forward keeps for the backward, summed over the layers from what each kind of layer declares it costs
// (model/layers/mixers.h CountLayerCost). These feed the scaling-law fits (N, C = 6ND-style budgets) and
// memory planning; model/language_model's tests check each against counts taken from a built model (its
// parameter tensors, the matmuls it runs and the activations its step state holds).
#ifndef LMFORGE_MODEL_ACCOUNTING_ACCOUNTING_H_
#define LMFORGE_MODEL_ACCOUNTING_ACCOUNTING_H_

#include <cstdint>

#include "kernels/core/dtype.h"
#include "model/config/config.h"

namespace lmf::model {

struct ParameterCounts {
  int64_t token_embedding = 0;     // vocab_rows * C (padded rows included: they are stored and trained-over)
  int64_t position_embedding = 0;  // context_length * C for learned positions, else 0
  int64_t blocks = 0;              // all n_layers transformer blocks (norms, attention, feed-forward)
  int64_t final_norm = 0;
  int64_t lm_head = 0;             // V * C when untied, 0 when tied
  // Of `blocks`, the parameters a token does not use: the routed experts a mixture of experts does not pick
  // for it (n_experts - top_k of them per layer); 0 for a dense model.
  int64_t inactive_experts = 0;

  int64_t total() const { return token_embedding + position_embedding + blocks + final_norm + lm_head; }
  // Kaplan et al.'s N: everything except the token and position embeddings (an untied LM head counts).
  int64_t non_embedding() const { return total() - token_embedding - position_embedding; }
  // What one token uses (a mixture of experts' "active" parameters): total() for a dense model.
  int64_t active() const { return total() - inactive_experts; }
  int64_t active_non_embedding() const { return non_embedding() - inactive_experts; }
};

ParameterCounts CountParameters(const ModelConfig& config);

// Floating-point operations per token (one multiply-add = 2 FLOPs) for sequences of length seq_len.
// Counted: every matmul (q/k/v/output projections, feed-forward, LM head) and the two attention products
// (Q K^T and P V) over the causal triangle only — a token at position t attends to t+1 keys, so the
// average is (seq_len + 1) / 2 keys (PaLM's 12*L*H*Q*T convention counts the full square instead).
// A mixture of experts counts its router, the top_k experts a token runs and its shared experts (dropless).
// Not counted: norms, activations, softmax, RoPE, the loss and the optimizer (O(C) per token, < 1%).
struct FlopsPerToken {
  double matmul_forward = 0;     // 2 * (weights touched by matmuls), the LM head included even when tied
  // 2 * 2 * n_layers * NH * HS * (keys a query attends on average: (seq_len + 1) / 2, fewer with a window)
  double attention_forward = 0;
  double forward() const { return matmul_forward + attention_forward; }
  // Backward costs twice the forward for both kinds: one product for the input gradient, one for the
  // weight (or the other operand) gradient.
  double training() const { return 3 * forward(); }
};

FlopsPerToken CountFlopsPerToken(const ModelConfig& config, int64_t seq_len);

// Bytes per token that the forward pass keeps for the backward, as LanguageModel stores them with
// activations of type `activations` (f32 or bf16; the norm statistics and log-sum-exps are fp32 either way):
// per block the block input, the norm outputs and statistics, q/k/v after RoPE, the attention output and
// its log-sum-exp per head, the residual between the two halves, the feed-forward pre-activations and
// activation output; then the final norm's input, output and statistics, and the logits (whose buffer the
// fused cross-entropy turns into their gradient) with the loss log-sum-exp, and the token ids and targets
// (int32).
struct ActivationBytesPerToken {
  int64_t per_block = 0;       // layer 0's (every layer's without a layer_pattern)
  int64_t blocks = 0;          // all n_layers blocks
  int64_t final_and_head = 0;
  int64_t n_layers = 0;
  int64_t total() const { return blocks + final_and_head; }
};

ActivationBytesPerToken CountActivationBytesPerToken(const ModelConfig& config,
                                                    kernels::DType activations = kernels::DType::kF32);

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_ACCOUNTING_ACCOUNTING_H_
