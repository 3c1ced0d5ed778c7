// The model message's conversion: every member of model::ModelConfig has a config path that names a field
// of the schema, and ToModelConfig reports the model's problems by those paths, all of them at once, after
// what the model does not build yet. (Each rule's message: validation_test; each field reaching the model:
// experiments/configs/configs_test.)
#include "config/model_conversion.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "config/experiment.pb.h"
#include "config/loader.h"
#include "gtest/gtest.h"
#include "google/protobuf/descriptor.h"

namespace lmf::config {
namespace {

// The members of model::ModelConfig that a config sets (padded_vocab_size is the model's own).
const char* const kMembers[] = {
    "vocab_size",     "context_length",    "d_model",      "n_layers",          "n_heads",
    "n_kv_heads",     "d_ff",              "norm",         "norm_eps",          "norm_placement",
    "parallel_block", "parallel_shared_norm", "qk_norm",   "sliding_window",    "global_every",
    "attention_softcap", "final_logit_softcap", "z_loss",  "ffn",               "positions",
    "rope_theta",     "biases",            "tied_embeddings", "init",           "init_std",
    "mup_base_d_model", "first_k_dense",
    // A mixture of experts' members (MoeSpec), as ModelConfig::Problems names them.
    "moe.n_experts", "moe.top_k", "moe.d_expert", "moe.shared_d_ff", "moe.normalize_gates", "moe.router",
    "moe.route_scale", "moe.n_groups", "moe.topk_groups", "moe.capacity_factor", "moe.aux_loss",
    "moe.router_z_loss", "moe.bias_update_rate"};

// The field at `path` ("model.ffn.d_ff") of an Experiment, or null.
const google::protobuf::FieldDescriptor* FieldAt(const std::string& path) {
  const google::protobuf::Descriptor* message = Experiment::descriptor();
  const google::protobuf::FieldDescriptor* field = nullptr;
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(path, '.'))) {
    if (message == nullptr) return nullptr;
    field = message->FindFieldByName(part);
    if (field == nullptr) return nullptr;
    message = field->message_type();
  }
  return field;
}

TEST(ModelConversion, EveryMemberHasTheConfigPathOfAField) {
  for (const char* member : kMembers) {
    const std::string path = ModelConfigPath(member);
    const google::protobuf::FieldDescriptor* field = FieldAt(path);
    ASSERT_NE(field, nullptr) << member << " -> " << path;
    EXPECT_NE(field->type(), google::protobuf::FieldDescriptor::TYPE_MESSAGE) << member << " -> " << path;
  }
  EXPECT_EQ(ModelConfigPath("d_ff"), "model.ffn.d_ff");
  EXPECT_EQ(ModelConfigPath("n_kv_heads"), "model.n_kv_heads");
}

Experiment Parse(const std::string& model) {
  auto parsed = ParseExperimentText(model, "model.textproto");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : Experiment();
}

TEST(ModelConversion, ReportsEveryProblemByItsConfigPath) {
  const Experiment e = Parse(R"pb(model {
    d_model: 30 n_layers: 1 n_heads: 4 vocab_size: 10 context_length: 4
    ffn { kind: KIND_UNSPECIFIED d_ff: -8 }
    norm { eps: 0 }
    attention { logit_softcap: -1 }
  })pb");
  const absl::StatusOr<model::ModelConfig> m = ToModelConfig(e.model());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message(),
            "model.ffn.kind must not be an UNSPECIFIED value\n"
            "model.ffn.d_ff=-8 must be positive\n"
            "model.n_heads=4 does not divide model.d_model=30\n"
            "model.norm.eps=0 must be positive\n"
            "model.attention.logit_softcap=-1 must be a finite number >= 0 (0 turns it off)");
}

TEST(ModelConversion, WhatTheModelDoesNotBuildComesFirst) {
  const Experiment e = Parse("model { d_model: 30 attention { mla { kv_lora_rank: 8 } } }");
  const absl::StatusOr<model::ModelConfig> m = ToModelConfig(e.model());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(m.status().message(), "model.attention.mla is not built by the model yet");
}

TEST(ModelConversion, AValidMessageConverts) {
  const Experiment e = Parse(R"pb(model {
    d_model: 64 n_layers: 2 n_heads: 4 n_kv_heads: 2 vocab_size: 97 context_length: 16
    ffn { kind: GEGLU d_ff: 96 } norm { kind: LAYERNORM placement: DOUBLE eps: 1e-6 }
    positional { kind: SINUSOIDAL } init { scheme: GPT2 std: 0.01 } bias: true
  })pb");
  const absl::StatusOr<model::ModelConfig> m = ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->n_kv_heads, 2);
  EXPECT_EQ(m->d_ff, 96);
  EXPECT_EQ(m->ffn, model::FfnKind::kGeGLU);
  EXPECT_EQ(m->norm, model::NormKind::kLayerNorm);
  EXPECT_EQ(m->norm_placement, model::NormPlacement::kDouble);
  EXPECT_EQ(m->norm_eps, static_cast<double>(1e-6f));
  EXPECT_EQ(m->positions, model::PositionKind::kSinusoidal);
  EXPECT_EQ(m->init, model::InitScheme::kGpt2Scaled);
  EXPECT_EQ(m->init_std, static_cast<double>(0.01f));
  EXPECT_TRUE(m->biases);
}

// model.layer_pattern: each entry's unset members take the model's; its rules are the model's own, reported
// by the entry's config path.
TEST(ModelConversion, ALayerPatternConvertsEntryByEntry) {
  const Experiment e = Parse(R"pb(model {
    d_model: 64 n_layers: 4 n_heads: 4 n_kv_heads: 2 vocab_size: 97 context_length: 16
    ffn { kind: SWIGLU d_ff: 96 } attention { qk_norm: true }
    layer_pattern { attention { sliding_window { window: 8 } } ffn { d_ff: 48 } }
    layer_pattern { n_heads: 2 ffn { kind: GELU d_ff: 128 } }
  })pb");
  const absl::StatusOr<model::ModelConfig> m = ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->layer_pattern.size(), 2u);
  const model::LayerSpec local = m->layer(2), global = m->layer(3);
  EXPECT_EQ(local.token_mixer.attention.n_heads, 4);
  EXPECT_EQ(local.token_mixer.attention.n_kv_heads, 2);
  EXPECT_EQ(local.token_mixer.attention.window, 8);
  EXPECT_FALSE(local.token_mixer.attention.qk_norm) << "an entry's attention replaces the model's";
  EXPECT_EQ(local.channel_mixer.feed_forward.kind, model::FfnKind::kSwiGLU) << "an unset kind is the model's";
  EXPECT_EQ(local.channel_mixer.feed_forward.d_ff, 48);
  EXPECT_EQ(global.token_mixer.attention.n_heads, 2);
  EXPECT_EQ(global.token_mixer.attention.n_kv_heads, 2) << "n_kv_heads: the entry's n_heads";
  EXPECT_EQ(global.token_mixer.attention.window, 0);
  EXPECT_TRUE(global.token_mixer.attention.qk_norm) << "no attention: the model's";
  EXPECT_EQ(global.channel_mixer.feed_forward.kind, model::FfnKind::kGELU);
  EXPECT_EQ(global.channel_mixer.feed_forward.d_ff, 128);

  const Experiment bad = Parse(R"pb(model {
    d_model: 64 n_layers: 4 n_heads: 4 vocab_size: 97 context_length: 16 ffn { kind: SWIGLU d_ff: 96 }
    layer_pattern { n_heads: 3 }
    layer_pattern { attention { sliding_window { window: 4 global_every: 2 } logit_softcap: -2 } }
  })pb");
  const absl::StatusOr<model::ModelConfig> refused = ToModelConfig(bad.model());
  ASSERT_FALSE(refused.ok());
  const std::string message(refused.status().message());
  for (const char* expected :
       {"model.layer_pattern[1].attention.sliding_window.global_every=2: a pattern's entries are its layers",
        "model.layer_pattern[0].n_heads=3 does not divide model.d_model=64",
        "model.layer_pattern[1].attention.logit_softcap=-2 must be a finite number >= 0"}) {
    EXPECT_NE(message.find(expected), std::string::npos) << expected << "\nin: " << message;
  }
}

// A layer_pattern entry's moe makes that entry's layers mixtures of experts (noisy gating included); its
// rules are model.moe's, reported at the entry's path.
TEST(ModelConversion, ALayerPatternEntryMayBeAMixtureOfExperts) {
  const Experiment e = Parse(R"pb(model {
    d_model: 64 n_layers: 4 n_heads: 4 vocab_size: 97 context_length: 16 ffn { kind: SWIGLU d_ff: 96 }
    layer_pattern { }
    layer_pattern { moe { n_experts: 4 top_k: 2 d_expert: 16 noisy_gating: true aux_loss: 0.01 } }
  })pb");
  const absl::StatusOr<model::ModelConfig> m = ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->layer(2).channel_mixer.kind, model::ChannelMixerSpec::Kind::kFeedForward);
  const model::LayerSpec moe = m->layer(3);
  ASSERT_EQ(moe.channel_mixer.kind, model::ChannelMixerSpec::Kind::kMoe);
  EXPECT_EQ(moe.channel_mixer.moe.n_experts, 4);
  EXPECT_EQ(moe.channel_mixer.moe.top_k, 2);
  EXPECT_TRUE(moe.channel_mixer.moe.noisy_gating);
  EXPECT_EQ(moe.channel_mixer.moe.aux_loss, 0.01);

  const Experiment bad = Parse(R"pb(model {
    d_model: 64 n_layers: 4 n_heads: 4 vocab_size: 97 context_length: 16 ffn { kind: SWIGLU d_ff: 96 }
    layer_pattern { moe { n_experts: 4 top_k: 5 d_expert: 16 } }
  })pb");
  const absl::StatusOr<model::ModelConfig> refused = ToModelConfig(bad.model());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("model.layer_pattern[0].moe.top_k=5"), std::string::npos)
      << refused.status().message();
}

// model.moe: every field reaches the MoeSpec; first_k_dense's layers keep model.moe.dense_ffn.
TEST(ModelConversion, AMixtureOfExpertsConverts) {
  const Experiment e = Parse(R"pb(model {
    d_model: 64 n_layers: 4 n_heads: 4 vocab_size: 97 context_length: 16
    moe {
      n_experts: 8 top_k: 2 d_expert: 32 expert_kind: GELU shared_d_ff: 48 router: SIGMOID_TOPK
      normalize_gates: true route_scale: 2.5 n_groups: 4 topk_groups: 2 capacity_factor: 1.25 drop: SCORE
      aux_loss: 0.01 aux_loss_scope: SEQUENCE router_z_loss: 0.001 expert_bias: true bias_update_rate: 0.002
      first_k_dense: 1 dense_ffn { kind: SWIGLU d_ff: 96 }
    }
  })pb");
  const absl::StatusOr<model::ModelConfig> m = ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->moe.has_value());
  const model::MoeSpec& s = *m->moe;
  EXPECT_EQ(s.n_experts, 8);
  EXPECT_EQ(s.top_k, 2);
  EXPECT_EQ(s.d_expert, 32);
  EXPECT_EQ(s.expert_kind, model::FfnKind::kGELU);
  EXPECT_EQ(s.shared_d_ff, 48);
  EXPECT_EQ(s.router, model::RouterKind::kSigmoidTopK);
  EXPECT_TRUE(s.normalize_gates);
  EXPECT_EQ(s.route_scale, 2.5);
  EXPECT_EQ(s.n_groups, 4);
  EXPECT_EQ(s.topk_groups, 2);
  EXPECT_EQ(s.capacity_factor, 1.25);
  EXPECT_EQ(s.drop, model::DropPolicy::kByScore);
  EXPECT_EQ(s.aux_loss, 0.01);
  EXPECT_EQ(s.aux_loss_scope, model::BalanceScope::kSequence);
  EXPECT_EQ(s.router_z_loss, 0.001);
  EXPECT_TRUE(s.expert_bias);
  EXPECT_EQ(s.bias_update_rate, 0.002);
  EXPECT_EQ(m->first_k_dense, 1);
  EXPECT_EQ(m->layer(0).channel_mixer.kind, model::ChannelMixerSpec::Kind::kFeedForward);
  EXPECT_EQ(m->layer(0).channel_mixer.feed_forward.d_ff, 96);
  EXPECT_EQ(m->layer(1).channel_mixer.kind, model::ChannelMixerSpec::Kind::kMoe);
}

TEST(ModelConversion, MixtureOfExpertsProblemsNameTheirFields) {
  const Experiment e = Parse(R"pb(model {
    d_model: 64 n_layers: 4 n_heads: 4 vocab_size: 97 context_length: 16
    moe { n_experts: 6 top_k: 8 n_groups: 4 router: ROUTER_UNSPECIFIED first_k_dense: 2 }
  })pb");
  const absl::StatusOr<model::ModelConfig> refused = ToModelConfig(e.model());
  ASSERT_FALSE(refused.ok());
  const std::string message(refused.status().message());
  for (const char* expected :
       {"model.moe.d_expert is required (a positive integer)", "model.moe.router must not be an UNSPECIFIED value",
        "model.moe.dense_ffn is required with model.moe.first_k_dense=2",
        "model.moe.top_k=8 is more than model.moe.n_experts=6",
        "model.moe.n_groups=4 must be positive and divide model.moe.n_experts=6"}) {
    EXPECT_NE(message.find(expected), std::string::npos) << expected << "\nin: " << message;
  }
  // A rule on a field the config's rules reported is not reported again; no path outside the schema.
  EXPECT_EQ(message.find("model.moe.d_expert=0"), std::string::npos) << message;
  EXPECT_EQ(message.find("model.ffn"), std::string::npos) << message;

  const Experiment unused = Parse(R"pb(model {
    d_model: 64 n_layers: 4 n_heads: 4 vocab_size: 97 context_length: 16
    moe { n_experts: 4 top_k: 2 d_expert: 8 dense_ffn { kind: SWIGLU d_ff: 0 } first_k_dense: 1 }
  })pb");
  const absl::StatusOr<model::ModelConfig> zero = ToModelConfig(unused.model());
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(std::string(zero.status().message()).find("model.moe.dense_ffn.d_ff=0 must be positive"),
            std::string::npos)
      << zero.status();
}

}  // namespace
}  // namespace lmf::config
