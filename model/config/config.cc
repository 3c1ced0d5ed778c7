// ModelConfig validation, names and the two reference-architecture factories.
#include "model/config/config.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lmf::model {

const char* NormKindName(NormKind kind) {
  switch (kind) {
    case NormKind::kRMSNorm: return "rmsnorm";
    case NormKind::kLayerNorm: return "layernorm";
  }
  return "?";
}

const char* NormPlacementName(NormPlacement placement) {
  switch (placement) {
    case NormPlacement::kPre: return "pre";
    case NormPlacement::kPost: return "post";
    case NormPlacement::kDouble: return "double";
  }
  return "?";
}

const char* FfnKindName(FfnKind kind) {
  switch (kind) {
    case FfnKind::kSwiGLU: return "swiglu";
    case FfnKind::kGELU: return "gelu";
    case FfnKind::kReLU: return "relu";
    case FfnKind::kGeGLU:
      return "geglu";
  }
  return "?";
}

const char* PositionKindName(PositionKind kind) {
  switch (kind) {
    case PositionKind::kRoPE: return "rope";
    case PositionKind::kLearned: return "learned";
    case PositionKind::kSinusoidal: return "sinusoidal";
    case PositionKind::kNone: return "none";
  }
  return "?";
}

const char* InitSchemeName(InitScheme scheme) {
  switch (scheme) {
    case InitScheme::kGpt2Scaled: return "gpt2_scaled";
    case InitScheme::kMup:
      return "mup";
    case InitScheme::kCs336TruncatedNormal: return "cs336_truncated_normal";
  }
  return "?";
}

namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("model config: ", message));
}

}  // namespace

absl::Status ModelConfig::Validate() const {
  const std::pair<const char*, int64_t> positive[] = {
      {"vocab_size", vocab_size}, {"context_length", context_length}, {"d_model", d_model},
      {"n_layers", n_layers},     {"n_heads", n_heads},               {"n_kv_heads", n_kv_heads},
      {"d_ff", d_ff}};
  for (const auto& [field, value] : positive) {
    if (value <= 0) return Invalid(absl::StrCat(field, "=", value, " must be positive"));
  }
  if (padded_vocab_size < 0 || (padded_vocab_size > 0 && padded_vocab_size < vocab_size)) {
    return Invalid(absl::StrCat("padded_vocab_size=", padded_vocab_size, " must be 0 (no padding) or at least vocab_size=",
                                vocab_size));
  }
  if (d_model % n_heads != 0) {
    return Invalid(absl::StrCat("n_heads=", n_heads, " does not divide d_model=", d_model));
  }
  if (n_kv_heads > n_heads) {
    return Invalid(absl::StrCat("n_kv_heads=", n_kv_heads, " is more than n_heads=", n_heads));
  }
  if (n_heads % n_kv_heads != 0) {
    return Invalid(absl::StrCat("n_kv_heads=", n_kv_heads, " does not divide n_heads=", n_heads,
                                " (each key/value head must serve the same number of query heads)"));
  }
  if (!(norm_eps > 0) || !std::isfinite(norm_eps)) {
    return Invalid(absl::StrCat("norm_eps=", norm_eps, " must be a positive finite number"));
  }
  if (sliding_window < 0) {
    return Invalid(absl::StrCat("sliding_window=", sliding_window, " must be >= 0 (0: no window)"));
  }
  if (global_every < 0) {
    return Invalid(absl::StrCat("global_every=", global_every, " must be >= 0 (0: every layer local)"));
  }
  if (!(attention_softcap >= 0) || !std::isfinite(attention_softcap)) {
    return Invalid(
        absl::StrCat("attention_softcap=", attention_softcap, " must be a finite number >= 0 (0: off)"));
  }
  if (!(final_logit_softcap >= 0) || !std::isfinite(final_logit_softcap)) {
    return Invalid(
        absl::StrCat("final_logit_softcap=", final_logit_softcap, " must be a finite number >= 0 (0: off)"));
  }
  if (!(z_loss >= 0) || !std::isfinite(z_loss)) {
    return Invalid(absl::StrCat("z_loss=", z_loss, " must be a finite number >= 0 (0 turns it off)"));
  }
  if (parallel_shared_norm && !parallel_block) {
    return Invalid("parallel_shared_norm needs parallel_block (it shares the parallel branches' norm)");
  }
  if (parallel_block && norm_placement != NormPlacement::kPre) {
    return Invalid(absl::StrCat("parallel_block needs norm_placement=pre, not ",
                                NormPlacementName(norm_placement),
                                " (the two branches read one normed block input)"));
  }
  if (positions == PositionKind::kRoPE) {
    if (head_size() % 2 != 0) {
      return Invalid(absl::StrCat("RoPE needs an even head size, but d_model=", d_model, " / n_heads=", n_heads,
                                  " = ", head_size()));
    }
    if (!(rope_theta > 1.0) || !std::isfinite(rope_theta)) {
      return Invalid(absl::StrCat("rope_theta=", rope_theta, " must be a finite number above 1"));
    }
  }
  if (positions == PositionKind::kSinusoidal && d_model % 2 != 0) {
    return Invalid(absl::StrCat("sinusoidal positions need an even d_model, got ", d_model));
  }
  if ((init == InitScheme::kGpt2Scaled || init == InitScheme::kMup) &&
      (!(init_std > 0) || !std::isfinite(init_std))) {
    return Invalid(absl::StrCat("init_std=", init_std, " must be a positive finite number"));
  }
  if (init == InitScheme::kMup) {
    if (mup_base_d_model <= 0) {
      return Invalid(absl::StrCat("mup_base_d_model=", mup_base_d_model, " must be positive with init=mup"));
    }
    if (tied_embeddings) {
      return Invalid(
          "init=mup needs untied embeddings (the input embedding and the LM head scale differently)");
    }
  }
  // Matrices of 2^31 or more elements are beyond what the CPU GEMMs are known to take (int dimensions): the
  // weights, and one sequence's widest activations at full context.
  struct Matrix {
    const char* what;
    int64_t rows, cols;
  };
  const char* vocab = padded_vocab_size > 0 ? "padded_vocab_size" : "vocab_size";
  const Matrix matrices[] = {
      {"the embedding (vocab rows x d_model)", vocab_rows(), d_model},
      {"an FFN weight (d_ff x d_model)", d_ff, d_model},
      {"an attention projection (n_heads * head size x d_model)", q_width(), d_model},
      {"one sequence's FFN activations (context_length x d_ff)", context_length, d_ff},
      {"one sequence's residual stream (context_length x d_model)", context_length, d_model},
  };
  for (const Matrix& m : matrices) {
    if (m.rows >= ((int64_t{1} << 31) + m.cols - 1) / m.cols) {  // rows * cols >= 2^31, without overflow
      return Invalid(absl::StrCat(m.what, " is ", m.rows, " x ", m.cols, ", 2^31 or more elements (", vocab,
                                  "=", vocab_rows(), ", d_model=", d_model, ", d_ff=", d_ff,
                                  ", context_length=", context_length, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelConfig::ValidateSequenceLength(int64_t seq_len) const {
  if (absl::Status status = Validate(); !status.ok()) return status;
  if (seq_len <= 0) return Invalid(absl::StrCat("sequence length ", seq_len, " must be positive"));
  if (seq_len > context_length) {
    return Invalid(absl::StrCat("sequence length ", seq_len, " is longer than context_length=", context_length,
                                positions == PositionKind::kLearned ? " (the learned position table)" : ""));
  }
  return absl::OkStatus();
}

std::string ModelConfig::DebugString() const {
  return absl::StrFormat(
      "vocab_size=%d padded_vocab_size=%d context_length=%d d_model=%d n_layers=%d n_heads=%d n_kv_heads=%d "
      "d_ff=%d norm=%s norm_eps=%g norm_placement=%s parallel_block=%d parallel_shared_norm=%d "
      "qk_norm=%d sliding_window=%d global_every=%d "
      "attention_softcap=%g ffn=%s "
      "positions=%s rope_theta=%g biases=%d tied_embeddings=%d init=%s init_std=%g z_loss=%g "
      "final_logit_softcap=%g mup_base_d_model=%d",
      vocab_size, padded_vocab_size, context_length, d_model, n_layers, n_heads, n_kv_heads, d_ff,
      NormKindName(norm), norm_eps, NormPlacementName(norm_placement), parallel_block, parallel_shared_norm,
      qk_norm, sliding_window, global_every, attention_softcap, FfnKindName(ffn), PositionKindName(positions),
      rope_theta, biases, tied_embeddings, InitSchemeName(init), init_std, z_loss, final_logit_softcap,
      mup_base_d_model);
}

ModelConfig Gpt2Config(int64_t vocab_size, int64_t context_length, int64_t d_model, int64_t n_layers,
                       int64_t n_heads) {
  ModelConfig c;
  c.vocab_size = vocab_size;
  c.context_length = context_length;
  c.d_model = d_model;
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_heads;
  c.d_ff = 4 * d_model;
  c.norm = NormKind::kLayerNorm;
  c.norm_eps = 1e-5;
  c.ffn = FfnKind::kGELU;
  c.positions = PositionKind::kLearned;
  c.biases = true;
  c.tied_embeddings = true;
  c.init = InitScheme::kGpt2Scaled;
  c.init_std = 0.02;
  return c;
}

ModelConfig Cs336Config(int64_t vocab_size, int64_t context_length, int64_t d_model, int64_t n_layers,
                        int64_t n_heads, int64_t d_ff, double rope_theta) {
  ModelConfig c;
  c.vocab_size = vocab_size;
  c.context_length = context_length;
  c.d_model = d_model;
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_heads;
  c.d_ff = d_ff;
  c.norm = NormKind::kRMSNorm;
  c.norm_eps = 1e-5;
  c.ffn = FfnKind::kSwiGLU;
  c.positions = PositionKind::kRoPE;
  c.rope_theta = rope_theta;
  c.biases = false;
  c.tied_embeddings = false;
  c.init = InitScheme::kCs336TruncatedNormal;
  return c;
}

}  // namespace lmf::model
