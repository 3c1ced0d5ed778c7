// Parameter, FLOP and activation-memory counts from a ModelConfig alone (see accounting.h), summed over the
// distinct layers from each layer kind's own counts (model/layers/mixers.h).
#include "model/accounting/accounting.h"

#include "model/layers/mixers.h"
#include "model/layers/norm/norm.h"

namespace lmf::model {

ParameterCounts CountParameters(const ModelConfig& c) {
  ParameterCounts p;
  p.token_embedding = c.vocab_rows() * c.d_model;
  p.position_embedding = c.positions == PositionKind::kLearned ? c.context_length * c.d_model : 0;
  for (const ModelConfig::LayerGroup& group : c.layer_groups()) {
    const LayerCost cost = CountLayerCost(c, group.spec, 1, kernels::DType::kF32);
    p.blocks += group.count * cost.parameters;
    p.inactive_experts += group.count * cost.inactive_parameters;
  }
  p.final_norm = c.has_final_norm() ? Norm::Parameters(c.norm, c.d_model) : 0;
  p.lm_head = c.tied_embeddings ? 0 : c.vocab_rows() * c.d_model;
  return p;
}

FlopsPerToken CountFlopsPerToken(const ModelConfig& c, int64_t seq_len) {
  FlopsPerToken f;
  f.matmul_forward = 2.0 * static_cast<double>(c.vocab_rows()) * c.d_model;  // the LM head
  for (const ModelConfig::LayerGroup& group : c.layer_groups()) {
    const LayerCost cost = CountLayerCost(c, group.spec, seq_len, kernels::DType::kF32);
    f.matmul_forward += static_cast<double>(group.count) * cost.matmul_flops_per_token;
    f.attention_forward += static_cast<double>(group.count) * cost.attention_flops_per_token;
  }
  return f;
}

ActivationBytesPerToken CountActivationBytesPerToken(const ModelConfig& c, kernels::DType activations) {
  const int64_t act = static_cast<int64_t>(kernels::DTypeSize(activations));
  const int64_t f32 = 4;
  const int64_t C = c.d_model;
  ActivationBytesPerToken a;
  a.n_layers = c.n_layers;
  for (const ModelConfig::LayerGroup& group : c.layer_groups()) {
    a.blocks += group.count * CountLayerCost(c, group.spec, 1, activations).saved_bytes_per_token;
  }
  a.per_block = c.n_layers > 0 ? CountLayerCost(c, c.layer(0), 1, activations).saved_bytes_per_token : 0;
  // The embedding output (the first block's input); the final norm's output and statistics (post-norm has
  // none: the head reads the last block's output); logits; the loss log-sum-exp; int32 ids and targets.
  a.final_and_head = act * (C + c.vocab_rows()) + f32 * 1 + 2 * 4;
  if (c.has_final_norm()) a.final_and_head += act * C + f32 * Norm::Statistics(c.norm);
  return a;
}

}  // namespace lmf::model
