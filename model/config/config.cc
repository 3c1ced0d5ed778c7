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

const char* TokenMixerKindName(TokenMixerSpec::Kind kind) {
  switch (kind) {
    case TokenMixerSpec::Kind::kAttention: return "attention";
  }
  return "?";
}

const char* ChannelMixerKindName(ChannelMixerSpec::Kind kind) {
  switch (kind) {
    case ChannelMixerSpec::Kind::kFeedForward: return "feed_forward";
  }
  return "?";
}

LayerSpec ModelConfig::layer(int64_t i) const {
  if (!layer_pattern.empty()) return layer_pattern[static_cast<size_t>(i) % layer_pattern.size()];
  LayerSpec spec;
  AttentionSpec& attention = spec.token_mixer.attention;
  attention.n_heads = n_heads;
  attention.n_kv_heads = n_kv_heads;
  attention.window = global_every > 0 && (i + 1) % global_every == 0 ? 0 : sliding_window;
  attention.softcap = attention_softcap;
  attention.qk_norm = qk_norm;
  spec.channel_mixer.feed_forward = FeedForwardSpec{ffn, d_ff};
  return spec;
}

std::vector<ModelConfig::LayerGroup> ModelConfig::layer_groups() const {
  std::vector<LayerGroup> groups;
  if (n_layers <= 0) return groups;
  if (!layer_pattern.empty()) {
    const int64_t period = static_cast<int64_t>(layer_pattern.size());
    for (int64_t k = 0; k < period && k < n_layers; ++k) {
      groups.push_back({layer_pattern[static_cast<size_t>(k)], n_layers / period + (k < n_layers % period ? 1 : 0)});
    }
    return groups;
  }
  const int64_t global = global_every > 0 ? n_layers / global_every : 0;  // layers global_every, 2 global_every, ...
  LayerSpec local = layer(0);  // layer 0 is global only with global_every = 1
  if (global_every == 1) return {{local, n_layers}};
  groups.push_back({local, n_layers - global});
  if (global > 0) groups.push_back({layer(global_every - 1), global});
  return groups;
}

namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("model config: ", message));
}

// The names the rules below give an attention layer's fields: the default layer's are ModelConfig's own
// (n_heads, sliding_window, ...), a pattern entry's are "layer_pattern[k].attention.<field>".
struct AttentionFieldNames {
  std::string n_heads, n_kv_heads, window, softcap;
};

absl::Status ValidateAttention(const AttentionSpec& a, const ModelConfig& m, const AttentionFieldNames& f) {
  if (a.n_heads <= 0) return Invalid(absl::StrCat(f.n_heads, "=", a.n_heads, " must be positive"));
  if (a.n_kv_heads <= 0) return Invalid(absl::StrCat(f.n_kv_heads, "=", a.n_kv_heads, " must be positive"));
  if (m.d_model % a.n_heads != 0) {
    return Invalid(absl::StrCat(f.n_heads, "=", a.n_heads, " does not divide d_model=", m.d_model));
  }
  if (a.n_kv_heads > a.n_heads) {
    return Invalid(absl::StrCat(f.n_kv_heads, "=", a.n_kv_heads, " is more than ", f.n_heads, "=", a.n_heads));
  }
  if (a.n_heads % a.n_kv_heads != 0) {
    return Invalid(absl::StrCat(f.n_kv_heads, "=", a.n_kv_heads, " does not divide ", f.n_heads, "=",
                                a.n_heads, " (each key/value head must serve the same number of query heads)"));
  }
  if (a.window < 0) return Invalid(absl::StrCat(f.window, "=", a.window, " must be >= 0 (0: no window)"));
  if (!(a.softcap >= 0) || !std::isfinite(a.softcap)) {
    return Invalid(absl::StrCat(f.softcap, "=", a.softcap, " must be a finite number >= 0 (0: off)"));
  }
  const int64_t head_size = m.d_model / a.n_heads;
  if (m.positions == PositionKind::kRoPE && head_size % 2 != 0) {
    return Invalid(absl::StrCat("RoPE needs an even head size, but d_model=", m.d_model, " / ", f.n_heads, "=",
                                a.n_heads, " = ", head_size));
  }
  return absl::OkStatus();
}

absl::Status ValidateFeedForward(const FeedForwardSpec& ffn, const std::string& d_ff_name) {
  if (ffn.d_ff <= 0) return Invalid(absl::StrCat(d_ff_name, "=", ffn.d_ff, " must be positive"));
  return absl::OkStatus();
}

// The default layer (pattern < 0) or layer_pattern[pattern].
absl::Status ValidateLayer(const LayerSpec& layer, const ModelConfig& m, int pattern) {
  const std::string at = pattern < 0 ? "" : absl::StrCat("layer_pattern[", pattern, "].");
  const TokenMixerSpec& token = layer.token_mixer;
  switch (token.kind) {
    case TokenMixerSpec::Kind::kAttention: {
      const AttentionFieldNames names =
          pattern < 0 ? AttentionFieldNames{"n_heads", "n_kv_heads", "sliding_window", "attention_softcap"}
                      : AttentionFieldNames{at + "attention.n_heads", at + "attention.n_kv_heads",
                                            at + "attention.window", at + "attention.softcap"};
      if (absl::Status s = ValidateAttention(token.attention, m, names); !s.ok()) return s;
      break;
    }
  }
  switch (layer.channel_mixer.kind) {
    case ChannelMixerSpec::Kind::kFeedForward:
      return ValidateFeedForward(layer.channel_mixer.feed_forward, at.empty() ? "d_ff" : at + "ffn.d_ff");
  }
  return absl::OkStatus();
}

// Matrices of 2^31 or more elements are beyond what the CPU GEMMs are known to take (int dimensions): the
// weights, and one sequence's widest activations at full context.
absl::Status ValidateMatrixSizes(const ModelConfig& m, int64_t d_ff, int64_t q_width) {
  struct Matrix {
    const char* what;
    int64_t rows, cols;
  };
  const char* vocab = m.padded_vocab_size > 0 ? "padded_vocab_size" : "vocab_size";
  const Matrix matrices[] = {
      {"the embedding (vocab rows x d_model)", m.vocab_rows(), m.d_model},
      {"an FFN weight (d_ff x d_model)", d_ff, m.d_model},
      {"an attention projection (n_heads * head size x d_model)", q_width, m.d_model},
      {"one sequence's FFN activations (context_length x d_ff)", m.context_length, d_ff},
      {"one sequence's residual stream (context_length x d_model)", m.context_length, m.d_model},
  };
  for (const Matrix& x : matrices) {
    if (x.rows >= ((int64_t{1} << 31) + x.cols - 1) / x.cols) {  // rows * cols >= 2^31, without overflow
      return Invalid(absl::StrCat(x.what, " is ", x.rows, " x ", x.cols, ", 2^31 or more elements (", vocab,
                                  "=", m.vocab_rows(), ", d_model=", m.d_model, ", d_ff=", d_ff,
                                  ", context_length=", m.context_length, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ModelConfig::Validate() const {
  const std::pair<const char*, int64_t> positive[] = {
      {"vocab_size", vocab_size}, {"context_length", context_length}, {"d_model", d_model}, {"n_layers", n_layers}};
  for (const auto& [field, value] : positive) {
    if (value <= 0) return Invalid(absl::StrCat(field, "=", value, " must be positive"));
  }
  // The default layer's fields describe every layer without a pattern (and are kept valid with one: they
  // are what a config without a pattern would build).
  if (absl::Status s = ValidateLayer(layer(0), *this, -1); !s.ok()) return s;
  if (global_every < 0) {
    return Invalid(absl::StrCat("global_every=", global_every, " must be >= 0 (0: every layer local)"));
  }
  for (size_t k = 0; k < layer_pattern.size(); ++k) {
    if (absl::Status s = ValidateLayer(layer_pattern[k], *this, static_cast<int>(k)); !s.ok()) return s;
  }
  if (padded_vocab_size < 0 || (padded_vocab_size > 0 && padded_vocab_size < vocab_size)) {
    return Invalid(absl::StrCat("padded_vocab_size=", padded_vocab_size, " must be 0 (no padding) or at least vocab_size=",
                                vocab_size));
  }
  if (!(norm_eps > 0) || !std::isfinite(norm_eps)) {
    return Invalid(absl::StrCat("norm_eps=", norm_eps, " must be a positive finite number"));
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
  if (positions == PositionKind::kRoPE && (!(rope_theta > 1.0) || !std::isfinite(rope_theta))) {
    return Invalid(absl::StrCat("rope_theta=", rope_theta, " must be a finite number above 1"));
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
  for (int64_t i = 0; i < n_layers && i < static_cast<int64_t>(std::max<size_t>(1, layer_pattern.size())); ++i) {
    const LayerSpec spec = layer(i);
    const int64_t q_width = spec.token_mixer.attention.n_heads * (d_model / spec.token_mixer.attention.n_heads);
    if (absl::Status s = ValidateMatrixSizes(*this, spec.channel_mixer.feed_forward.d_ff, q_width); !s.ok()) {
      return s;
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
  std::string pattern;
  for (const LayerSpec& layer : layer_pattern) {
    const AttentionSpec& a = layer.token_mixer.attention;
    const FeedForwardSpec& f = layer.channel_mixer.feed_forward;
    absl::StrAppend(&pattern, pattern.empty() ? " layer_pattern=[" : "; ",
                    absl::StrFormat("%s(n_heads=%d n_kv_heads=%d window=%d softcap=%g qk_norm=%d) %s(d_ff=%d)",
                                    TokenMixerKindName(layer.token_mixer.kind), a.n_heads, a.n_kv_heads,
                                    a.window, a.softcap, a.qk_norm, FfnKindName(f.kind), f.d_ff));
  }
  if (!pattern.empty()) pattern += "]";
  return absl::StrFormat(
      "vocab_size=%d padded_vocab_size=%d context_length=%d d_model=%d n_layers=%d n_heads=%d n_kv_heads=%d "
      "d_ff=%d norm=%s norm_eps=%g norm_placement=%s parallel_block=%d parallel_shared_norm=%d "
      "qk_norm=%d sliding_window=%d global_every=%d "
      "attention_softcap=%g ffn=%s "
      "positions=%s rope_theta=%g biases=%d tied_embeddings=%d init=%s init_std=%g z_loss=%g "
      "final_logit_softcap=%g mup_base_d_model=%d%s",
      vocab_size, padded_vocab_size, context_length, d_model, n_layers, n_heads, n_kv_heads, d_ff,
      NormKindName(norm), norm_eps, NormPlacementName(norm_placement), parallel_block, parallel_shared_norm,
      qk_norm, sliding_window, global_every, attention_softcap, FfnKindName(ffn), PositionKindName(positions),
      rope_theta, biases, tied_embeddings, InitSchemeName(init), init_std, z_loss, final_logit_softcap,
      mup_base_d_model, pattern);
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
