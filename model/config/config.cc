// ModelConfig validation, names and the two reference-architecture factories.
#include "model/config/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

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
    case ChannelMixerSpec::Kind::kMoe: return "moe";
  }
  return "?";
}

const char* RouterKindName(RouterKind kind) {
  switch (kind) {
    case RouterKind::kSoftmaxTopK: return "softmax_topk";
    case RouterKind::kTopKSoftmax: return "topk_softmax";
    case RouterKind::kSigmoidTopK: return "sigmoid_topk";
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
  if (moe.has_value() && i >= first_k_dense) {
    spec.channel_mixer.kind = ChannelMixerSpec::Kind::kMoe;
    spec.channel_mixer.moe = *moe;
  }
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
  // Layers [first, last), which share a channel mixer: the local layers, then the global ones (layers
  // global_every - 1, 2 global_every - 1, ... from 0).
  const auto add_range = [&](int64_t first, int64_t last) {
    if (first >= last) return;
    const int64_t global = global_every > 0 ? last / global_every - first / global_every : 0;
    if (last - first > global) {
      int64_t local = first;
      while (global_every > 0 && (local + 1) % global_every == 0) ++local;
      groups.push_back({layer(local), last - first - global});
    }
    if (global > 0) groups.push_back({layer((first / global_every + 1) * global_every - 1), global});
  };
  const int64_t dense = moe.has_value() ? std::min(std::max<int64_t>(first_k_dense, 0), n_layers) : n_layers;
  add_range(0, dense);
  add_range(dense, n_layers);
  return groups;
}

namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("model config: ", message));
}

// The problems Problems() finds. Name() gives a member's name for a message; a message built with the name
// of a member the namer leaves out (one the caller has reported) is dropped by the Add() it is passed to:
// the Name() calls in Add's argument run before Add does.
class ProblemList {
 public:
  explicit ProblemList(const ModelFieldNamer& namer) : namer_(namer) {}
  std::string Name(std::string_view member) {
    std::optional<std::string> name = namer_ ? namer_(member) : std::string(member);
    if (!name.has_value()) leaves_out_member_ = true;
    return name.value_or(std::string(member));
  }
  void Add(std::string message) {
    if (!leaves_out_member_) problems_.push_back(std::move(message));
    leaves_out_member_ = false;
  }
  std::vector<std::string> Take() { return std::move(problems_); }

 private:
  const ModelFieldNamer& namer_;
  bool leaves_out_member_ = false;
  std::vector<std::string> problems_;
};

// An enum value as a config writes it: "PRE", "ROPE".
std::string ConfigSpelling(const char* name) { return absl::AsciiStrToUpper(name); }

bool FiniteAtLeastZero(double value) { return value >= 0 && std::isfinite(value); }

// The kernels apply epsilons in fp32: a positive double that rounds to 0 or inf there, or to a subnormal
// (flushed to 0 on GPUs), is not positive.
bool PositiveInFp32(double value) {
  const float f = static_cast<float>(value);
  return f >= std::numeric_limits<float>::min() && std::isfinite(f);
}

// Matrices of 2^31 or more elements are beyond what the CPU GEMMs are known to take (int dimensions): the
// weights, and one sequence's widest activations at full context. Adds the first such matrix, naming the
// two members that size it.
void AddOversizedMatrix(const ModelConfig& c, ProblemList& p) {
  struct Size {
    const char* member;
    int64_t value;
  };
  struct Matrix {
    const char* what;
    int64_t rows, cols;
    Size first, second;
  };
  const Size vocab = {c.padded_vocab_size > 0 ? "padded_vocab_size" : "vocab_size", c.vocab_rows()};
  const Size d_model = {"d_model", c.d_model}, d_ff = {"d_ff", c.d_ff};
  const Size context = {"context_length", c.context_length}, heads = {"n_heads", c.n_heads};
  const Matrix matrices[] = {
      {"the embedding (vocab rows x d_model)", c.vocab_rows(), c.d_model, vocab, d_model},
      {"an FFN weight (d_ff x d_model)", c.d_ff, c.d_model, d_ff, d_model},
      {"an attention projection (n_heads * head size x d_model)", c.q_width(), c.d_model, heads, d_model},
      {"one sequence's FFN activations (context_length x d_ff)", c.context_length, c.d_ff, context, d_ff},
      {"one sequence's residual stream (context_length x d_model)", c.context_length, c.d_model, context,
       d_model},
  };
  for (const Matrix& m : matrices) {
    if (m.cols <= 0 || m.rows < ((int64_t{1} << 31) + m.cols - 1) / m.cols) continue;  // rows * cols < 2^31
    p.Add(absl::StrCat(m.what, " is ", m.rows, " x ", m.cols, ", 2^31 or more elements (",
                       p.Name(m.first.member), "=", m.first.value, ", ", p.Name(m.second.member), "=",
                       m.second.value, ")"));
    return;
  }
}

// Heads: sizes that divide, and an even head size for RoPE.
void AddHeadProblems(const ModelConfig& c, ProblemList& p) {
  if (c.d_model > 0 && c.n_heads > 0 && c.d_model % c.n_heads != 0) {
    p.Add(absl::StrCat(p.Name("n_heads"), "=", c.n_heads, " does not divide ", p.Name("d_model"), "=",
                       c.d_model));
  } else if (c.d_model > 0 && c.n_heads > 0 && c.positions == PositionKind::kRoPE && c.head_size() % 2 != 0) {
    p.Add(absl::StrCat(p.Name("positions"), "=ROPE needs an even head size, but ", p.Name("d_model"), "=",
                       c.d_model, " / ", p.Name("n_heads"), "=", c.n_heads, " = ", c.head_size()));
  }
  if (c.n_heads > 0 && c.n_kv_heads > c.n_heads) {
    p.Add(absl::StrCat(p.Name("n_kv_heads"), "=", c.n_kv_heads, " is more than ", p.Name("n_heads"), "=",
                       c.n_heads));
  } else if (c.n_heads > 0 && c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads != 0) {
    p.Add(absl::StrCat(p.Name("n_kv_heads"), "=", c.n_kv_heads, " does not divide ", p.Name("n_heads"), "=",
                       c.n_heads, " (each key/value head must serve the same number of query heads)"));
  }
}

// The attention pattern: the window, the interleaved global layers and the logit soft-cap.
void AddAttentionProblems(const ModelConfig& c, ProblemList& p) {
  if (c.sliding_window < 0) {
    p.Add(absl::StrCat(p.Name("sliding_window"), "=", c.sliding_window,
                       " must not be negative (0: no window)"));
  } else if (c.context_length > 0 && c.sliding_window > c.context_length) {
    p.Add(absl::StrCat(p.Name("sliding_window"), "=", c.sliding_window, " exceeds ", p.Name("context_length"),
                       "=", c.context_length));
  }
  if (c.global_every < 0) {
    p.Add(absl::StrCat(p.Name("global_every"), "=", c.global_every, " must not be negative"));
  }
  if (!FiniteAtLeastZero(c.attention_softcap)) {
    p.Add(absl::StrCat(p.Name("attention_softcap"), "=", c.attention_softcap,
                       " must be a finite number >= 0 (0 turns it off)"));
  }
}

// Positions: RoPE's base and the sinusoidal table's even width (RoPE's even head size: AddHeadProblems).
void AddPositionProblems(const ModelConfig& c, ProblemList& p) {
  if (c.positions == PositionKind::kRoPE && !(c.rope_theta > 1 && std::isfinite(c.rope_theta))) {
    p.Add(absl::StrCat(p.Name("rope_theta"), "=", c.rope_theta,
                       " must be a finite number above 1 (the base of RoPE's wavelengths)"));
  }
  if (c.positions == PositionKind::kSinusoidal && c.d_model % 2 != 0) {
    p.Add(absl::StrCat(p.Name("positions"), "=SINUSOIDAL needs an even ", p.Name("d_model"),
                       " (a sine and a cosine per frequency), got ", c.d_model));
  }
}

// The initialisation's std and muP's base width and untied embeddings.
void AddInitProblems(const ModelConfig& c, ProblemList& p) {
  if (!(c.init_std > 0 && std::isfinite(c.init_std))) {
    p.Add(absl::StrCat(p.Name("init_std"), "=", c.init_std, " must be a positive finite number"));
  }
  if (c.init != InitScheme::kMup) return;
  if (c.mup_base_d_model <= 0) {
    p.Add(absl::StrCat(p.Name("mup_base_d_model"), "=", c.mup_base_d_model, " must be positive with ",
                       p.Name("init"), "=MUP (the width its lr was tuned at)"));
  }
  if (c.tied_embeddings) {
    p.Add(absl::StrCat(p.Name("init"), "=MUP needs ", p.Name("tied_embeddings"),
                       "=false (the input embedding and the LM head scale differently with width)"));
  }
}

// The mixture of experts: sizes, routing groups, and coefficients. Members "moe.<field>".
void AddMoeProblems(const MoeSpec& m, ProblemList& p) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"moe.n_experts", m.n_experts}, {"moe.top_k", m.top_k}, {"moe.d_expert", m.d_expert}};
  for (const auto& [member, value] : sizes) {
    if (value <= 0) p.Add(absl::StrCat(p.Name(member), "=", value, " must be positive"));
  }
  if (m.n_experts > 0 && m.top_k > m.n_experts) {
    p.Add(absl::StrCat(p.Name("moe.top_k"), "=", m.top_k, " is more than ", p.Name("moe.n_experts"), "=",
                       m.n_experts));
  }
  if (m.shared_d_ff < 0) {
    p.Add(absl::StrCat(p.Name("moe.shared_d_ff"), "=", m.shared_d_ff, " must not be negative (0: no shared experts)"));
  }
  if (m.n_groups <= 0 || (m.n_experts > 0 && m.n_experts % m.n_groups != 0)) {
    p.Add(absl::StrCat(p.Name("moe.n_groups"), "=", m.n_groups, " must be positive and divide ",
                       p.Name("moe.n_experts"), "=", m.n_experts));
  } else if (m.topk_groups <= 0 || m.topk_groups > m.n_groups) {
    p.Add(absl::StrCat(p.Name("moe.topk_groups"), "=", m.topk_groups, " must be in [1, ", p.Name("moe.n_groups"),
                       "=", m.n_groups, "]"));
  } else if (m.n_experts > 0 && m.top_k > m.topk_groups * (m.n_experts / m.n_groups)) {
    p.Add(absl::StrCat(p.Name("moe.top_k"), "=", m.top_k, " is more than the ", m.topk_groups * (m.n_experts / m.n_groups),
                       " experts of ", p.Name("moe.topk_groups"), "=", m.topk_groups, " groups of ",
                       m.n_experts / m.n_groups));
  }
  if (m.normalize_gates && m.router == RouterKind::kTopKSoftmax) {
    p.Add(absl::StrCat(p.Name("moe.normalize_gates"), "=true with ", p.Name("moe.router"),
                       "=TOPK_SOFTMAX: its gates sum to 1 already"));
  }
  if (!(m.route_scale > 0 && std::isfinite(m.route_scale))) {
    p.Add(absl::StrCat(p.Name("moe.route_scale"), "=", m.route_scale, " must be a positive finite number"));
  }
  const std::pair<const char*, double> coefficients[] = {{"moe.capacity_factor", m.capacity_factor},
                                                         {"moe.aux_loss", m.aux_loss},
                                                         {"moe.router_z_loss", m.router_z_loss},
                                                         {"moe.bias_update_rate", m.bias_update_rate}};
  for (const auto& [member, value] : coefficients) {
    if (!FiniteAtLeastZero(value)) {
      p.Add(absl::StrCat(p.Name(member), "=", value, " must be a finite number >= 0 (0 turns it off)"));
    }
  }
}

// Every rule of this file on `c`, its members named by `namer`.
std::vector<std::string> CollectProblems(const ModelConfig& c, const ModelFieldNamer& namer) {
  ProblemList p(namer);
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", c.vocab_size}, {"context_length", c.context_length}, {"d_model", c.d_model},
      {"n_layers", c.n_layers},     {"n_heads", c.n_heads},               {"n_kv_heads", c.n_kv_heads},
      {"d_ff", c.has_dense_ffn() ? c.d_ff : 1}};  // a d_ff no layer uses needs no value
  for (const auto& [member, value] : sizes) {
    if (value <= 0) p.Add(absl::StrCat(p.Name(member), "=", value, " must be positive"));
  }
  if (c.padded_vocab_size < 0 || (c.padded_vocab_size > 0 && c.padded_vocab_size < c.vocab_size)) {
    p.Add(absl::StrCat(p.Name("padded_vocab_size"), "=", c.padded_vocab_size,
                       " must be 0 (no padding) or at least ", p.Name("vocab_size"), "=", c.vocab_size));
  }
  AddHeadProblems(c, p);
  if (!(c.norm_eps > 0)) {
    p.Add(absl::StrCat(p.Name("norm_eps"), "=", c.norm_eps, " must be positive"));
  } else if (!PositiveInFp32(c.norm_eps)) {
    p.Add(absl::StrCat(p.Name("norm_eps"), "=", c.norm_eps,
                       " is not a positive fp32 number (the kernels apply it in fp32)"));
  }
  if (c.parallel_shared_norm && !c.parallel_block) {
    p.Add(absl::StrCat(p.Name("parallel_shared_norm"), "=true needs ", p.Name("parallel_block"),
                       "=true (it shares the parallel branches' norm)"));
  }
  if (c.parallel_block && c.norm_placement != NormPlacement::kPre) {
    p.Add(absl::StrCat(p.Name("parallel_block"), "=true needs ", p.Name("norm_placement"), "=PRE, not ",
                       ConfigSpelling(NormPlacementName(c.norm_placement)),
                       " (the two branches read one normed block input)"));
  }
  AddAttentionProblems(c, p);
  if (!FiniteAtLeastZero(c.final_logit_softcap)) {
    p.Add(absl::StrCat(p.Name("final_logit_softcap"), "=", c.final_logit_softcap,
                       " must be a finite number >= 0 (0 turns it off)"));
  }
  if (!FiniteAtLeastZero(c.z_loss)) {
    p.Add(absl::StrCat(p.Name("z_loss"), "=", c.z_loss, " must be a finite number >= 0 (0 turns it off)"));
  }
  AddPositionProblems(c, p);
  AddInitProblems(c, p);
  if (c.moe.has_value()) {
    AddMoeProblems(*c.moe, p);
    if (!c.layer_pattern.empty()) {
      p.Add(absl::StrCat(p.Name("moe"), " sets the default layers' channel mixer; with ", p.Name("layer_pattern"),
                         " each pattern entry names its own"));
    }
  }
  if (c.first_k_dense < 0 || (c.n_layers > 0 && c.first_k_dense > c.n_layers)) {
    p.Add(absl::StrCat(p.Name("first_k_dense"), "=", c.first_k_dense, " must be in [0, ", p.Name("n_layers"), "=",
                       c.n_layers, "]"));
  } else if (c.first_k_dense > 0 && !c.moe.has_value()) {
    p.Add(absl::StrCat(p.Name("first_k_dense"), "=", c.first_k_dense, " needs a ", p.Name("moe"),
                       " (the layers after the dense ones)"));
  }
  AddOversizedMatrix(c, p);
  return p.Take();
}

}  // namespace

// The rules are written once, for the fields of the default layer; each layer_pattern entry is checked by
// the same rules on a copy of the config whose default layer is that entry, its members named as the
// experiment config names them ("layer_pattern[k].n_heads", "layer_pattern[k].ffn.d_ff", ...). Problems of the model's other fields, which every copy
// shares, are reported once.
std::vector<std::string> ModelConfig::Problems(const ModelFieldNamer& namer) const {
  std::vector<std::string> problems = CollectProblems(*this, namer);
  for (size_t k = 0; k < layer_pattern.size(); ++k) {
    const LayerSpec& spec = layer_pattern[k];
    ModelConfig entry = *this;
    entry.layer_pattern.clear();
    entry.n_heads = spec.token_mixer.attention.n_heads;
    entry.n_kv_heads = spec.token_mixer.attention.n_kv_heads;
    entry.sliding_window = spec.token_mixer.attention.window;
    entry.global_every = 0;
    entry.attention_softcap = spec.token_mixer.attention.softcap;
    entry.qk_norm = spec.token_mixer.attention.qk_norm;
    entry.ffn = spec.channel_mixer.feed_forward.kind;
    entry.d_ff = spec.channel_mixer.feed_forward.d_ff;
    entry.moe.reset();
    entry.first_k_dense = 0;
    if (spec.channel_mixer.kind == ChannelMixerSpec::Kind::kMoe) entry.moe = spec.channel_mixer.moe;
    const std::string at = absl::StrCat("layer_pattern[", k, "].");
    const ModelFieldNamer entry_namer = [&](std::string_view member) -> std::optional<std::string> {
      static const std::pair<std::string_view, std::string_view> kLayerMembers[] = {
          {"n_heads", "n_heads"}, {"n_kv_heads", "n_kv_heads"},
          {"sliding_window", "attention.sliding_window.window"}, {"attention_softcap", "attention.logit_softcap"},
          {"d_ff", "ffn.d_ff"}};
      if (member.substr(0, 4) == "moe.") {
        const std::string entry_member = absl::StrCat(at, std::string(member));
        return namer ? namer(entry_member) : std::optional<std::string>(entry_member);
      }
      for (const auto& [name, path] : kLayerMembers) {
        if (member == name) {
          const std::string entry_member = absl::StrCat(at, std::string(path));
          return namer ? namer(entry_member) : std::optional<std::string>(entry_member);
        }
      }
      return namer ? namer(member) : std::optional<std::string>(std::string(member));
    };
    for (std::string& problem : CollectProblems(entry, entry_namer)) {
      if (std::find(problems.begin(), problems.end(), problem) == problems.end()) problems.push_back(problem);
    }
  }
  return problems;
}

absl::Status ModelConfig::Validate(const ModelFieldNamer& namer) const {
  const std::vector<std::string> problems = Problems(namer);
  if (problems.empty()) return absl::OkStatus();
  std::vector<std::string> lines;
  for (const std::string& problem : problems) lines.push_back(absl::StrCat("model config: ", problem));
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
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

std::string MoeDebugString(const MoeSpec& m) {
  return absl::StrFormat(
      "moe(n_experts=%d top_k=%d d_expert=%d expert_kind=%s shared_d_ff=%d router=%s normalize_gates=%d "
      "route_scale=%g n_groups=%d topk_groups=%d capacity_factor=%g drop=%s aux_loss=%g aux_loss_scope=%s "
      "router_z_loss=%g expert_bias=%d bias_update_rate=%g noisy_gating=%d)",
      m.n_experts, m.top_k, m.d_expert, FfnKindName(m.expert_kind), m.shared_d_ff, RouterKindName(m.router),
      m.normalize_gates, m.route_scale, m.n_groups, m.topk_groups, m.capacity_factor,
      m.drop == DropPolicy::kByScore ? "score" : "position", m.aux_loss,
      m.aux_loss_scope == BalanceScope::kSequence ? "sequence" : "micro_batch", m.router_z_loss, m.expert_bias,
      m.bias_update_rate, m.noisy_gating);
}

std::string ModelConfig::DebugString() const {
  std::string pattern;
  for (const LayerSpec& layer : layer_pattern) {
    const AttentionSpec& a = layer.token_mixer.attention;
    const FeedForwardSpec& f = layer.channel_mixer.feed_forward;
    absl::StrAppend(&pattern, pattern.empty() ? " layer_pattern=[" : "; ",
                    absl::StrFormat("%s(n_heads=%d n_kv_heads=%d window=%d softcap=%g qk_norm=%d) ",
                                    TokenMixerKindName(layer.token_mixer.kind), a.n_heads, a.n_kv_heads,
                                    a.window, a.softcap, a.qk_norm),
                    layer.channel_mixer.kind == ChannelMixerSpec::Kind::kMoe
                        ? MoeDebugString(layer.channel_mixer.moe)
                        : absl::StrFormat("%s(d_ff=%d)", FfnKindName(f.kind), f.d_ff));
  }
  if (!pattern.empty()) pattern += "]";
  if (moe.has_value()) {
    absl::StrAppend(&pattern, " first_k_dense=", first_k_dense, " ", MoeDebugString(*moe));
  }
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
