// Embedding: token embedding plus the additive positional schemes. x (B*T, C) = wte[ids] + position term,
// where the position term is a learned table (position_embeddings.weight, context_length x C), the fixed
// sinusoidal table (PE[p, 2i] = sin(p / 10000^(2i/C)), PE[p, 2i+1] = cos(...)), or nothing (RoPE, which the
// attention applies, and "none"). No step state: the output x (activation dtype) and the ids (int32) live in
// an EmbeddingActivations the caller owns, one per micro-batch. The fp32 table gradients accumulate.
#ifndef LMFORGE_MODEL_LAYERS_EMBEDDING_EMBEDDING_H_
#define LMFORGE_MODEL_LAYERS_EMBEDDING_EMBEDDING_H_

#include <cstdint>
#include <string>

#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/deferred_weight_grads.h"
#include "model/layers/parameter.h"

namespace lmf::model {

// What the token table is to the initialisation (model/language_model/init.h): an embedding, or, when the LM
// head reads it (config.tied_embeddings), the output matrix, so that the head's logits start small under
// every scheme (TRUNCATED_NORMAL would draw an embedding from N(0, 1): logits of std ~sqrt(d_model) and a
// first loss several times ln(V)). GPT2 draws both kinds alike; MUP refuses tied tables.
ParameterKind TokenTableKind(const ModelConfig& config);

// One micro-batch's embedding: the output (B*T, C) and, for the backward, the ids (and learned positions'
// ids), on the model's device.
struct EmbeddingActivations {
  int64_t b = 0, t = 0, first_position = 0;
  kernels::Tensor ids;           // (B*T) int32
  kernels::Tensor position_ids;  // (B*T) int32, row r holds first_position + r % T; learned positions only
  kernels::Tensor out;           // (B*T, C)

  const void* output() const { return out.data(); }
  // Bytes kept for the backward (the output, which the first block reads, and the ids).
  int64_t bytes() const;
};

class Embedding {
 public:
  // Tables on ctx's device; activations of type `dtype`.
  Embedding(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype);

  // ids (B, T) int32 in HOST memory, each in [0, V) (the caller validates); copied to the device ->
  // saved.output() (B*T, C). Token t of each sequence sits at position first_position + t (the incremental
  // forward embeds one new token per sequence at the cache's length); first_position + T <= context_length
  // where the positions are a table (learned, sinusoidal).
  void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const int32_t* ids, int64_t first_position,
               EmbeddingActivations& saved) const;
  // dx (B*T, C) -> accumulates into the token (and learned position) table gradients, or with `deferred`
  // queues that (with a copy of dx; saved's ids must stay unchanged until it runs).
  void Backward(const kernels::Context& ctx, const EmbeddingActivations& saved, const void* dx,
                DeferredWeightGrads* deferred = nullptr) const;

  const Parameter& token_table() const { return tokens_; }
  // Visits "token_embeddings.weight" and, for learned positions, "position_embeddings.weight".
  void VisitParameters(const ParameterVisitor& visit) const;

 private:
  PositionKind positions_;
  int64_t c_, context_length_;
  kernels::DType dtype_;
  Parameter tokens_, learned_;
  kernels::Tensor sinusoidal_;  // (context_length, C) in the activation dtype, sinusoidal positions only
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_EMBEDDING_EMBEDDING_H_
