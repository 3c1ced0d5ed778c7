// Embedding: token embedding plus the additive positional schemes. x (B*T, C) = wte[ids] + position term,
// where the position term is a learned table (position_embeddings.weight, context_length x C), the fixed
// sinusoidal table (PE[p, 2i] = sin(p / 10000^(2i/C)), PE[p, 2i+1] = cos(...)), or nothing (RoPE, which the
// attention applies, and "none"). Step state: the output x and the ids. Gradients accumulate into the
// tables.
#ifndef LMFORGE_MODEL_LAYERS_EMBEDDING_H_
#define LMFORGE_MODEL_LAYERS_EMBEDDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/parameter.h"

namespace lmf::model {

class Embedding {
 public:
  explicit Embedding(const ModelConfig& config);

  // ids (B, T) int32, each in [0, V) (the caller validates) -> output() (B*T, C).
  void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const int32_t* ids);
  const float* output() const { return out_.data<float>(); }
  // dx (B*T, C) -> accumulates into the token (and learned position) table gradients.
  void Backward(const kernels::Context& ctx, const float* dx) const;

  const Parameter& token_table() const { return tokens_; }
  int64_t saved_bytes() const;
  // Visits "token_embeddings.weight" and, for learned positions, "position_embeddings.weight".
  void VisitParameters(const ParameterVisitor& visit) const;

 private:
  PositionKind positions_;
  int64_t c_;
  Parameter tokens_, learned_;
  std::vector<float> sinusoidal_;  // (context_length, C), sinusoidal positions only
  // Step state.
  int64_t b_ = 0, t_ = 0;
  std::vector<int32_t> ids_;
  kernels::Tensor out_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_EMBEDDING_H_
