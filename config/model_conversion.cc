// Model message -> lmf::model::ModelConfig, and the model message's validation (see model_conversion.h).
#include "config/model_conversion.h"

#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lmf::config {
namespace {

// The members of model::ModelConfig whose config path is not "model.<member>".
constexpr std::pair<std::string_view, std::string_view> kRenamedMembers[] = {
    {"d_ff", "model.ffn.d_ff"},
    {"ffn", "model.ffn.kind"},
    {"norm", "model.norm.kind"},
    {"norm_eps", "model.norm.eps"},
    {"norm_placement", "model.norm.placement"},
    {"positions", "model.positional.kind"},
    {"rope_theta", "model.positional.rope_theta"},
    {"qk_norm", "model.attention.qk_norm"},
    {"sliding_window", "model.attention.sliding_window.window"},
    {"global_every", "model.attention.sliding_window.global_every"},
    {"attention_softcap", "model.attention.logit_softcap"},
    {"biases", "model.bias"},
    {"init", "model.init.scheme"},
    {"init_std", "model.init.std"},
    {"mup_base_d_model", "model.init.mup_base_d_model"},
    {"first_k_dense", "model.moe.first_k_dense"},
};

// With a mixture of experts, the dense feed-forward (of the first_k_dense layers) is model.moe.dense_ffn.
constexpr std::pair<std::string_view, std::string_view> kMoeRenamedMembers[] = {
    {"d_ff", "model.moe.dense_ffn.d_ff"},
    {"ffn", "model.moe.dense_ffn.kind"},
};

model::FfnKind FfnKindOf(FeedForwardConfig::Kind kind, model::FfnKind unspecified) {
  switch (kind) {
    case FeedForwardConfig::SWIGLU: return model::FfnKind::kSwiGLU;
    case FeedForwardConfig::GELU: return model::FfnKind::kGELU;
    case FeedForwardConfig::RELU: return model::FfnKind::kReLU;
    case FeedForwardConfig::GEGLU: return model::FfnKind::kGeGLU;
    default: return unspecified;
  }
}

model::MoeSpec ConvertMoe(const MoeConfig& moe) {
  model::MoeSpec s;
  s.n_experts = moe.n_experts();
  s.top_k = moe.top_k();
  s.d_expert = moe.d_expert();
  s.expert_kind = FfnKindOf(moe.expert_kind(), model::FfnKind::kSwiGLU);
  s.shared_d_ff = moe.shared_d_ff();
  s.router = moe.router() == MoeConfig::TOPK_SOFTMAX   ? model::RouterKind::kTopKSoftmax
             : moe.router() == MoeConfig::SIGMOID_TOPK ? model::RouterKind::kSigmoidTopK
                                                       : model::RouterKind::kSoftmaxTopK;
  s.normalize_gates = moe.normalize_gates();
  s.route_scale = moe.route_scale();
  s.n_groups = moe.n_groups();
  s.topk_groups = moe.topk_groups();
  s.capacity_factor = moe.capacity_factor();
  s.drop = moe.drop() == MoeConfig::SCORE ? model::DropPolicy::kByScore : model::DropPolicy::kByPosition;
  s.aux_loss = moe.aux_loss();
  s.aux_loss_scope =
      moe.aux_loss_scope() == MoeConfig::SEQUENCE ? model::BalanceScope::kSequence : model::BalanceScope::kMicroBatch;
  s.router_z_loss = moe.router_z_loss();
  s.expert_bias = moe.expert_bias();
  s.bias_update_rate = moe.bias_update_rate();
  s.noisy_gating = moe.noisy_gating();
  return s;
}

// layer_pattern[k] over the model's own layer (m's default fields, converted already).
model::LayerSpec ConvertBlock(const BlockConfig& block, const model::ModelConfig& m) {
  model::LayerSpec spec;
  model::AttentionSpec& a = spec.token_mixer.attention;
  a.n_heads = block.has_n_heads() ? block.n_heads() : m.n_heads;
  a.n_kv_heads = block.has_n_kv_heads() ? block.n_kv_heads() : block.has_n_heads() ? block.n_heads() : m.n_kv_heads;
  if (block.has_attention()) {
    const AttentionConfig& attention = block.attention();
    a.window = attention.has_sliding_window() ? attention.sliding_window().window() : 0;
    a.qk_norm = attention.qk_norm();
    a.softcap = attention.logit_softcap();
  } else {
    a.window = m.sliding_window;
    a.qk_norm = m.qk_norm;
    a.softcap = m.attention_softcap;
  }
  model::FeedForwardSpec& f = spec.channel_mixer.feed_forward;
  f.kind = block.has_ffn() ? FfnKindOf(block.ffn().kind(), m.ffn) : m.ffn;
  f.d_ff = block.has_ffn() && block.ffn().has_d_ff() ? block.ffn().d_ff() : m.d_ff;
  if (block.has_moe()) {
    spec.channel_mixer.kind = model::ChannelMixerSpec::Kind::kMoe;
    spec.channel_mixer.moe = ConvertMoe(block.moe());
  }
  return spec;
}

// Every field, unchecked: an UNSPECIFIED enum (ValidateModel reports it) becomes a choice that no rule of
// the model depends on, so that the model's rules still run on the rest.
model::ModelConfig Convert(const ModelConfig& proto) {
  model::ModelConfig m;
  m.vocab_size = proto.vocab_size();
  m.context_length = proto.context_length();
  m.d_model = proto.d_model();
  m.n_layers = proto.n_layers();
  m.n_heads = proto.n_heads();
  m.n_kv_heads = proto.has_n_kv_heads() ? proto.n_kv_heads() : proto.n_heads();
  m.d_ff = proto.ffn().d_ff();
  m.biases = proto.bias();
  m.tied_embeddings = proto.tied_embeddings();
  m.norm = proto.norm().kind() == NormConfig::LAYERNORM ? model::NormKind::kLayerNorm
                                                         : model::NormKind::kRMSNorm;
  m.norm_eps = proto.norm().eps();
  switch (proto.norm().placement()) {
    case NormConfig::POST: m.norm_placement = model::NormPlacement::kPost; break;
    case NormConfig::DOUBLE: m.norm_placement = model::NormPlacement::kDouble; break;
    default: m.norm_placement = model::NormPlacement::kPre; break;
  }
  m.parallel_block = proto.parallel_block();
  m.parallel_shared_norm = proto.parallel_shared_norm();
  m.z_loss = proto.z_loss();
  m.final_logit_softcap = proto.final_logit_softcap();
  m.ffn = FfnKindOf(proto.ffn().kind(), model::FfnKind::kSwiGLU);
  if (proto.has_moe()) {
    m.moe = ConvertMoe(proto.moe());
    m.first_k_dense = proto.moe().first_k_dense();
    m.d_ff = proto.moe().dense_ffn().d_ff();
    m.ffn = FfnKindOf(proto.moe().dense_ffn().kind(), model::FfnKind::kSwiGLU);
  }
  switch (proto.positional().kind()) {
    case PositionalConfig::ROPE: m.positions = model::PositionKind::kRoPE; break;
    case PositionalConfig::LEARNED: m.positions = model::PositionKind::kLearned; break;
    case PositionalConfig::SINUSOIDAL: m.positions = model::PositionKind::kSinusoidal; break;
    default: m.positions = model::PositionKind::kNone; break;
  }
  m.rope_theta = proto.positional().rope_theta();
  switch (proto.init().scheme()) {
    case InitConfig::GPT2: m.init = model::InitScheme::kGpt2Scaled; break;
    case InitConfig::MUP: m.init = model::InitScheme::kMup; break;
    default: m.init = model::InitScheme::kCs336TruncatedNormal; break;
  }
  m.init_std = proto.init().std();
  m.mup_base_d_model = proto.init().mup_base_d_model();
  const AttentionConfig& attention = proto.attention();
  if (attention.has_sliding_window()) {
    m.sliding_window = attention.sliding_window().window();
    m.global_every = attention.sliding_window().global_every();
  }
  m.qk_norm = attention.qk_norm();
  m.attention_softcap = attention.logit_softcap();
  for (const BlockConfig& block : proto.layer_pattern()) m.layer_pattern.push_back(ConvertBlock(block, m));
  return m;
}

// True for a member whose config field the config's rules report (absent, or a window that is not
// positive): the model's rules on its converted value would report it again. An absent n_kv_heads is
// n_heads's value, whose rules cover it.
bool ReportedByTheConfig(const ModelConfig& proto, std::string_view member) {
  if (member == "d_model") return !proto.has_d_model();
  if (member == "n_layers") return !proto.has_n_layers();
  if (member == "n_heads") return !proto.has_n_heads();
  if (member == "n_kv_heads") return !proto.has_n_kv_heads();
  if (member == "vocab_size") return !proto.has_vocab_size();
  if (member == "context_length") return !proto.has_context_length();
  if (member == "d_ff") return proto.has_moe() ? !proto.moe().dense_ffn().has_d_ff() : !proto.ffn().has_d_ff();
  if (member == "moe.n_experts") return !proto.moe().has_n_experts();
  if (member == "moe.top_k") return !proto.moe().has_top_k();
  if (member == "moe.d_expert") return !proto.moe().has_d_expert();
  // "layer_pattern[k].moe.n_experts" and the like: a pattern entry's required sizes.
  const size_t end = member.find("].moe.");
  int k = -1;
  if (member.rfind("layer_pattern[", 0) == 0 && end != std::string_view::npos &&
      absl::SimpleAtoi(std::string(member.substr(14, end - 14)), &k) && k >= 0 && k < proto.layer_pattern_size()) {
    const MoeConfig& moe = proto.layer_pattern(k).moe();
    const std::string_view field = member.substr(end + 6);
    if (field == "n_experts") return !moe.has_n_experts();
    if (field == "top_k") return !moe.has_top_k();
    if (field == "d_expert") return !moe.has_d_expert();
  }
  if (member == "sliding_window") {
    return proto.attention().has_sliding_window() && !(proto.attention().sliding_window().window() > 0);
  }
  return false;
}

// The fields of the attention variants: a window (which the model takes; 0 there means none, so the config
// requires a positive one) and multi-head latent attention's (which it does not build yet).
void ValidateAttentionVariant(const AttentionConfig& attention, ConfigErrors* errors) {
  if (attention.has_sliding_window()) {
    const SlidingWindowAttention& sliding = attention.sliding_window();
    RequirePositive(sliding.has_window(), sliding.window(), "model.attention.sliding_window.window", errors);
  } else if (attention.has_mla()) {
    const MultiLatentAttention& mla = attention.mla();
    RequirePositive(mla.has_kv_lora_rank(), mla.kv_lora_rank(), "model.attention.mla.kv_lora_rank", errors);
    RequirePositive(mla.has_rope_head_dim(), mla.rope_head_dim(), "model.attention.mla.rope_head_dim",
                    errors);
    RequireNonNegative(mla.q_lora_rank(), "model.attention.mla.q_lora_rank", errors);
    if (mla.rope_head_dim() > 0 && mla.rope_head_dim() % 2 != 0) {
      errors->Add(absl::StrCat("model.attention.mla.rope_head_dim=", mla.rope_head_dim(), " must be even"));
    }
  }
}

// The mixture of experts' required sizes and enums, and the dense feed-forward of its first_k_dense layers.
// `at`: where the message is ("model.moe", "model.layer_pattern[1].moe").
void ValidateMoe(const MoeConfig& moe, const std::string& at, ConfigErrors* errors) {
  const std::pair<bool, const char*> required[] = {
      {moe.has_n_experts(), ".n_experts"}, {moe.has_top_k(), ".top_k"}, {moe.has_d_expert(), ".d_expert"}};
  for (const auto& [present, field] : required) {
    if (!present) errors->Add(absl::StrCat(at, field, " is required (a positive integer)"));
  }
  RequireSpecified(moe.expert_kind(), at + ".expert_kind", errors);
  RequireSpecified(moe.router(), at + ".router", errors);
  RequireSpecified(moe.drop(), at + ".drop", errors);
  RequireSpecified(moe.aux_loss_scope(), at + ".aux_loss_scope", errors);
  if (at != "model.moe") {
    if (moe.first_k_dense() != 0) {
      errors->Add(absl::StrCat(at, ".first_k_dense=", moe.first_k_dense(),
                               " applies to model.moe only (a pattern's entries say which layers are dense)"));
    }
    return;
  }
  if (moe.first_k_dense() > 0) {
    if (!moe.has_dense_ffn()) {
      errors->Add(absl::StrCat("model.moe.dense_ffn is required with model.moe.first_k_dense=", moe.first_k_dense(),
                               " (kind and d_ff of the first layers' feed-forward)"));
    } else {
      RequireSpecified(moe.dense_ffn().kind(), "model.moe.dense_ffn.kind", errors);
      if (!moe.dense_ffn().has_d_ff()) errors->Add("model.moe.dense_ffn.d_ff is required (a positive integer)");
    }
  }
  // model.moe.dense_ffn with first_k_dense 0 is not refused: a resolved config (loader.h) holds every
  // sub-message with its defaults, so its presence says nothing (as for the WSD fields of another schedule).
}

}  // namespace

std::string ModelConfigPath(std::string_view member) {
  for (const auto& [renamed, path] : kRenamedMembers) {
    if (member == renamed) return std::string(path);
  }
  return "model." + std::string(member);
}

void ValidateModel(const ModelConfig& model, ConfigErrors* errors) {
  const std::pair<bool, const char*> required[] = {
      {model.has_d_model(), "model.d_model"},       {model.has_n_layers(), "model.n_layers"},
      {model.has_n_heads(), "model.n_heads"},       {model.has_vocab_size(), "model.vocab_size"},
      {model.has_context_length(), "model.context_length"}};
  for (const auto& [present, path] : required) {
    if (!present) errors->Add(absl::StrCat(path, " is required (a positive integer)"));
  }
  RequireSpecified(model.norm().kind(), "model.norm.kind", errors);
  RequireSpecified(model.norm().placement(), "model.norm.placement", errors);
  if (model.has_moe()) {
    ValidateMoe(model.moe(), "model.moe", errors);
  } else if (!model.has_ffn()) {
    errors->Add("model.ffn is required (kind and d_ff of the feed-forward layer)");
  } else {
    RequireSpecified(model.ffn().kind(), "model.ffn.kind", errors);
    if (!model.ffn().has_d_ff()) errors->Add("model.ffn.d_ff is required (a positive integer)");
  }
  RequireSpecified(model.positional().kind(), "model.positional.kind", errors);
  RequireSpecified(model.init().scheme(), "model.init.scheme", errors);
  if (model.init().scheme() != InitConfig::MUP && model.init().has_mup_base_d_model()) {
    errors->Add(absl::StrCat("model.init.mup_base_d_model applies to model.init.scheme=MUP only, not ",
                             InitConfig::Scheme_Name(model.init().scheme())));
  }
  ValidateAttentionVariant(model.attention(), errors);
  for (int k = 0; k < model.layer_pattern_size(); ++k) {
    const BlockConfig& block = model.layer_pattern(k);
    const std::string at = absl::StrCat("model.layer_pattern[", k, "]");
    if (block.attention().has_mla()) errors->Add(absl::StrCat(at, ".attention.mla is not built by the model yet"));
    if (block.has_moe()) {
      if (block.has_ffn()) errors->Add(absl::StrCat(at, " sets both ffn and moe: its feed-forward is one of them"));
      ValidateMoe(block.moe(), at + ".moe", errors);
    }
    if (block.attention().has_sliding_window()) {
      const SlidingWindowAttention& sliding = block.attention().sliding_window();
      RequirePositive(sliding.has_window(), sliding.window(), at + ".attention.sliding_window.window", errors);
      if (sliding.global_every() != 0) {
        errors->Add(absl::StrCat(at, ".attention.sliding_window.global_every=", sliding.global_every(),
                                 ": a pattern's entries are its layers (global_every applies to model.attention "
                                 "only)"));
      }
    }
  }

  const model::ModelFieldNamer config_path = [&model](std::string_view member) -> std::optional<std::string> {
    if (ReportedByTheConfig(model, member)) return std::nullopt;
    if (model.has_moe()) {
      for (const auto& [renamed, path] : kMoeRenamedMembers) {
        if (member == renamed) return std::string(path);
      }
    }
    return ModelConfigPath(member);
  };
  for (std::string& problem : Convert(model).Problems(config_path)) errors->Add(std::move(problem));
}

absl::StatusOr<model::ModelConfig> ToModelConfig(const ModelConfig& proto) {
  if (proto.attention().has_mla()) {
    return absl::UnimplementedError("model.attention.mla is not built by the model yet");
  }
  for (int k = 0; k < proto.layer_pattern_size(); ++k) {
    if (proto.layer_pattern(k).attention().has_mla()) {
      return absl::UnimplementedError(
          absl::StrCat("model.layer_pattern[", k, "].attention.mla is not built by the model yet"));
    }
  }
  ConfigErrors errors;
  ValidateModel(proto, &errors);
  if (!errors.empty()) return errors.ToStatus("");
  return Convert(proto);
}

}  // namespace lmf::config
