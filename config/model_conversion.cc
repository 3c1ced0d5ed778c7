// Proto -> lmf::model::ModelConfig (see model_spec.h).
#include "experiments/trainer/model_spec.h"

#include "absl/strings/str_cat.h"

namespace lmf::experiments {

absl::StatusOr<model::ModelConfig> ToModelConfig(const config::ModelConfig& proto) {
  auto unsupported = [](const std::string& what) {
    return absl::UnimplementedError(absl::StrCat(what, " is not built by the model yet"));
  };
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

  switch (proto.norm().kind()) {
    case config::NormConfig::RMSNORM: m.norm = model::NormKind::kRMSNorm; break;
    case config::NormConfig::LAYERNORM: m.norm = model::NormKind::kLayerNorm; break;
    default: return unsupported(absl::StrCat("model.norm.kind=", config::NormConfig::Kind_Name(proto.norm().kind())));
  }
  m.norm_eps = proto.norm().eps();
  switch (proto.norm().placement()) {
    case config::NormConfig::PRE: m.norm_placement = model::NormPlacement::kPre; break;
    case config::NormConfig::POST: m.norm_placement = model::NormPlacement::kPost; break;
    case config::NormConfig::DOUBLE: m.norm_placement = model::NormPlacement::kDouble; break;
    default: return unsupported("model.norm.placement=PLACEMENT_UNSPECIFIED");
  }
  m.parallel_block = proto.parallel_block();
  m.parallel_shared_norm = proto.parallel_shared_norm();
  m.z_loss = proto.z_loss();
  m.final_logit_softcap = proto.final_logit_softcap();
  switch (proto.ffn().kind()) {
    case config::FeedForwardConfig::SWIGLU: m.ffn = model::FfnKind::kSwiGLU; break;
    case config::FeedForwardConfig::GELU: m.ffn = model::FfnKind::kGELU; break;
    case config::FeedForwardConfig::RELU: m.ffn = model::FfnKind::kReLU; break;
    case config::FeedForwardConfig::GEGLU:
      m.ffn = model::FfnKind::kGeGLU;
      break;
    default: return unsupported("model.ffn.kind=KIND_UNSPECIFIED");
  }
  switch (proto.positional().kind()) {
    case config::PositionalConfig::ROPE: m.positions = model::PositionKind::kRoPE; break;
    case config::PositionalConfig::LEARNED: m.positions = model::PositionKind::kLearned; break;
    case config::PositionalConfig::SINUSOIDAL: m.positions = model::PositionKind::kSinusoidal; break;
    case config::PositionalConfig::NONE: m.positions = model::PositionKind::kNone; break;
    default: return unsupported("model.positional.kind=KIND_UNSPECIFIED");
  }
  m.rope_theta = proto.positional().rope_theta();
  switch (proto.init().scheme()) {
    case config::InitConfig::GPT2: m.init = model::InitScheme::kGpt2Scaled; break;
    case config::InitConfig::TRUNCATED_NORMAL: m.init = model::InitScheme::kCs336TruncatedNormal; break;
    case config::InitConfig::MUP:
      m.init = model::InitScheme::kMup;
      break;
    default: return unsupported("model.init.scheme=SCHEME_UNSPECIFIED");
  }
  m.init_std = proto.init().std();
  m.mup_base_d_model = proto.init().mup_base_d_model();

  const config::AttentionConfig& attention = proto.attention();
  if (attention.has_sliding_window()) {
    m.sliding_window = attention.sliding_window().window();
    m.global_every = attention.sliding_window().global_every();
  }
  if (attention.has_mla()) return unsupported("model.attention.mla");
  m.qk_norm = attention.qk_norm();
  m.attention_softcap = attention.logit_softcap();

  if (absl::Status s = m.Validate(); !s.ok()) return s;
  return m;
}

}  // namespace lmf::experiments
