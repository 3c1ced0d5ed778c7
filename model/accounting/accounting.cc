// Parameter, FLOP and activation-memory counts from a ModelConfig alone (see accounting.h).
#include "model/accounting/accounting.h"

namespace lmf::model {
namespace {

int64_t FfnMatrices(const ModelConfig& c) { return c.gated_ffn() ? 3 : 2; }
int64_t NormParameters(const ModelConfig& c) { return c.norm == NormKind::kLayerNorm ? 2 * c.d_model : c.d_model; }
int64_t NormStatistics(const ModelConfig& c) { return c.norm == NormKind::kLayerNorm ? 2 : 1; }  // mean, rstd

// Weights of one block's matmuls: q, k, v, output projections and the feed-forward.
int64_t BlockMatmulWeights(const ModelConfig& c) {
  return c.d_model * c.q_width() + 2 * c.d_model * c.kv_width() + c.q_width() * c.d_model +
         FfnMatrices(c) * c.d_model * c.d_ff;
}

}  // namespace

ParameterCounts CountParameters(const ModelConfig& c) {
  ParameterCounts p;
  p.token_embedding = c.vocab_rows() * c.d_model;
  p.position_embedding = c.positions == PositionKind::kLearned ? c.context_length * c.d_model : 0;
  int64_t block = c.norms_per_block() * NormParameters(c) + BlockMatmulWeights(c);
  if (c.biases) {
    block += c.q_width() + 2 * c.kv_width() + c.d_model;      // q, k, v, output
    block += (FfnMatrices(c) - 1) * c.d_ff + c.d_model;        // w1 (and w3), w2
  }
  if (c.qk_norm) block += 2 * (c.norm == NormKind::kLayerNorm ? 2 : 1) * c.head_size();  // q_norm, k_norm
  p.blocks = c.n_layers * block;
  p.final_norm = c.has_final_norm() ? NormParameters(c) : 0;
  p.lm_head = c.tied_embeddings ? 0 : c.vocab_rows() * c.d_model;
  return p;
}

FlopsPerToken CountFlopsPerToken(const ModelConfig& c, int64_t seq_len) {
  FlopsPerToken f;
  f.matmul_forward = 2.0 * (static_cast<double>(c.n_layers) * BlockMatmulWeights(c) +
                            static_cast<double>(c.vocab_rows()) * c.d_model);
  if (seq_len > 0) {
    f.attention_forward =
        2.0 * 2.0 * c.n_heads * c.head_size() * c.attended_pairs(seq_len) / static_cast<double>(seq_len);
  }
  return f;
}

ActivationBytesPerToken CountActivationBytesPerToken(const ModelConfig& c, kernels::DType activations) {
  const int64_t act = static_cast<int64_t>(kernels::DTypeSize(activations));
  const int64_t f32 = 4;
  const int64_t C = c.d_model;
  ActivationBytesPerToken a;
  a.n_layers = c.n_layers;
  int64_t values = 0, statistics = 0;
  // What each block keeps (its input is the previous block's output, counted there): every norm's output
  // and statistics; the residual sum at its end (post: ln2's input); the residual between the halves (not
  // parallel; post: ln1's input); each branch's output before its norm (double).
  values += c.norms_per_block() * C, statistics += c.norms_per_block() * NormStatistics(c);
  values += C;
  if (!c.parallel_block) values += C;
  if (c.norm_placement == NormPlacement::kDouble) values += 2 * C;
  values += c.q_width() + 2 * c.kv_width();                     // q, k, v (after RoPE)
  if (c.qk_norm) {  // q and k heads before QK-norm and its outputs; its statistics per head
    values += 2 * (c.q_width() + c.kv_width()), statistics += (c.n_heads + c.n_kv_heads) * NormStatistics(c);
  }
  values += c.q_width(), statistics += c.n_heads;               // attention output; log-sum-exp per head
  values += (FfnMatrices(c) - 1) * c.d_ff + c.d_ff;             // pre-activation(s), activation output
  a.per_block = act * values + f32 * statistics;
  // The embedding output (the first block's input); the final norm's output and statistics (post-norm has
  // none: the head reads the last block's output); logits; the loss log-sum-exp; int32 ids and targets.
  a.final_and_head = act * (C + c.vocab_rows()) + f32 * 1 + 2 * 4;
  if (c.has_final_norm()) a.final_and_head += act * C + f32 * NormStatistics(c);
  return a;
}

}  // namespace lmf::model
