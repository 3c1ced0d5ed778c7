// Embedding: token embedding plus the additive positional schemes. x (B*T, C) = wte[ids] + position term,
// where the position term is a learned table (position_embeddings.weight, context_length x C), the fixed
// sinusoidal table (PE[p, 2i] = sin(p / 10000^(2i/C)), PE[p, 2i+1] = cos(...)), or nothing (RoPE, which the
// attention applies, and "none"). Step state: the output x (activation dtype) and the ids (int32), on the
// model's device. The fp32 table gradients accumulate.
#ifndef LMFORGE_MODEL_LAYERS_EMBEDDING_H_
#define LMFORGE_MODEL_LAYERS_EMBEDDING_H_

#include <cstdint>
#include <string>

#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/parameter.h"

namespace lmf::model {

class Embedding {
 public:
  // Tables on ctx's device; activations of type `dtype`.
  Embedding(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype);

  // ids (B, T) int32 in HOST memory, each in [0, V) (the caller validates); copied to the device ->
  // output() (B*T, C). Token t of each sequence sits at position first_position + t (the incremental forward
  // embeds one new token per sequence at the cache's length); first_position + T <= context_length where the
  // positions are a table (learned, sinusoidal).
  void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const int32_t* ids, int64_t first_position = 0);
  // (B*T, C) in the activation dtype on the model's device.
  const void* output() const { return out_.data(); }
  // dx (B*T, C) -> accumulates into the token (and learned position) table gradients.
  void Backward(const kernels::Context& ctx, const void* dx) const;

  const Parameter& token_table() const { return tokens_; }
  int64_t saved_bytes() const;
  // Visits "token_embeddings.weight" and, for learned positions, "position_embeddings.weight".
  void VisitParameters(const ParameterVisitor& visit) const;

 private:
  PositionKind positions_;
  int64_t c_, context_length_;
  kernels::DType dtype_;
  Parameter tokens_, learned_;
  kernels::Tensor sinusoidal_;  // (context_length, C) in the activation dtype, sinusoidal positions only
  // Step state.
  int64_t b_ = 0, t_ = 0, first_position_ = 0;
  kernels::Tensor ids_;           // (B*T) int32
  kernels::Tensor position_ids_;  // (B*T) int32, row r holds first_position + r % T; learned positions only
                                  // (their backward)
  kernels::Tensor out_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_EMBEDDING_H_
