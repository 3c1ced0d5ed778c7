// The ready configs load, validate, convert to a model the model code accepts, and have the sizes their
// names promise (GPT-2 small's 124M parameters; CS336's TinyStories model).
#include <string>

#include "config/loader.h"
#include "config/model_conversion.h"
#include "config/run_length.h"
#include "gtest/gtest.h"
#include "model/accounting/accounting.h"

namespace lmf::experiments {
namespace {

config::Experiment Load(const std::string& name) {
  auto loaded = config::LoadExperiment("experiments/configs/" + name + ".textproto", {});
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *loaded : config::Experiment();
}

TEST(Configs, TinyIsSmallAndFast) {
  const config::Experiment e = Load("tiny");
  auto m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_LT(model::CountParameters(*m).total(), 200000);
  EXPECT_EQ(config::TotalSteps(e), 100);
}

// 8 experts of 3 * 64 * 48 weights, 2 of them active; the router (8 x 64) and the shared expert count as
// active; the dense first layer is tiny's.
TEST(Configs, TinyMoeCountsActiveParameters) {
  const config::Experiment e = Load("tiny_moe");
  auto m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->moe.has_value());
  EXPECT_EQ(m->layer(0).channel_mixer.kind, model::ChannelMixerSpec::Kind::kFeedForward);
  EXPECT_EQ(m->layer(1).channel_mixer.kind, model::ChannelMixerSpec::Kind::kMoe);
  const model::ParameterCounts counts = model::CountParameters(*m);
  EXPECT_EQ(counts.inactive_experts, 6 * 3 * 64 * 48);
  EXPECT_EQ(counts.total() - counts.active(), 6 * 3 * 64 * 48);
  EXPECT_LT(counts.total(), 400000);
}

// OLMoE-1B-7B: 6.92B parameters, 1.28B active (the paper's counts, embeddings included).
TEST(Configs, OlmoeHasItsTotalAndActiveParameters) {
  const config::Experiment e = Load("olmoe_1b_7b");
  auto m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  const model::ParameterCounts counts = model::CountParameters(*m);
  EXPECT_NEAR(static_cast<double>(counts.total()), 6.92e9, 0.01e9);
  EXPECT_NEAR(static_cast<double>(counts.active()), 1.28e9, 0.01e9);
  EXPECT_EQ(counts.inactive_experts, 16LL * 56 * 3 * 2048 * 1024);  // 56 of each layer's 64 experts idle
}

TEST(Configs, Gpt2SmallHas124MParameters) {
  const config::Experiment e = Load("gpt2_small");
  auto m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  // GPT-2 small: 124,439,808 parameters with its 50257-token vocabulary; padding to 50304 adds 47 * 768.
  EXPECT_EQ(model::CountParameters(*m).total(), 124439808 + 47 * 768);
  EXPECT_EQ(config::TokensPerStep(e), 8 * 64 * 1024);
  EXPECT_EQ(config::TotalSteps(e), 10000000000 / (8 * 64 * 1024));
}

TEST(Configs, Cs336TinyStoriesMatchesTheAssignment) {
  const config::Experiment e = Load("cs336_tinystories");
  auto m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->vocab_size, 10000);
  EXPECT_EQ(m->context_length, 256);
  EXPECT_EQ(m->d_model, 512);
  EXPECT_EQ(m->d_ff, 1344);
  EXPECT_EQ(m->n_layers, 4);
  EXPECT_EQ(m->n_heads, 16);
  EXPECT_EQ(m->rope_theta, 10000);
  EXPECT_EQ(m->positions, model::PositionKind::kRoPE);
  EXPECT_EQ(m->ffn, model::FfnKind::kSwiGLU);
  EXPECT_FALSE(m->tied_embeddings);
  EXPECT_EQ(config::TotalSteps(e) * config::TokensPerStep(e), 327680000);
}

TEST(ModelSpec, RejectsWhatTheModelDoesNotBuild) {
  config::Experiment e = Load("tiny");
  e.mutable_model()->mutable_attention()->mutable_mla()->set_kv_lora_rank(8);
  EXPECT_EQ(config::ToModelConfig(e.model()).status().message(),
            "model.attention.mla is not built by the model yet");
}

TEST(ModelSpec, BlockStructuresReachTheModel) {
  config::Experiment e = Load("tiny");
  e.mutable_model()->mutable_norm()->set_placement(config::NormConfig::POST);
  auto m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->norm_placement, model::NormPlacement::kPost);
  EXPECT_FALSE(m->parallel_block);
  e.mutable_model()->mutable_norm()->set_placement(config::NormConfig::DOUBLE);
  m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->norm_placement, model::NormPlacement::kDouble);
  e.mutable_model()->mutable_norm()->set_placement(config::NormConfig::PRE);
  e.mutable_model()->set_parallel_block(true);
  m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->parallel_block);
  EXPECT_FALSE(m->qk_norm);
  e.mutable_model()->mutable_attention()->set_qk_norm(true);
  m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->qk_norm);
  EXPECT_EQ(m->sliding_window, 0);
  e.mutable_model()->mutable_attention()->mutable_sliding_window()->set_window(8);
  m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->sliding_window, 8);
  EXPECT_EQ(m->global_every, 0);
  e.mutable_model()->mutable_attention()->mutable_sliding_window()->set_global_every(6);
  m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->global_every, 6);
  EXPECT_EQ(m->layer_window(4), 8);
  EXPECT_EQ(m->layer_window(5), 0);
  e.mutable_model()->mutable_attention()->set_logit_softcap(30);
  m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->attention_softcap, 30);
  e.mutable_model()->set_final_logit_softcap(30);
  m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->final_logit_softcap, 30);
  e.mutable_model()->set_parallel_block(true);
  e.mutable_model()->set_parallel_shared_norm(true);
  m = config::ToModelConfig(e.model());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->parallel_shared_norm);
  EXPECT_EQ(m->norms_per_block(), 1);
}

}  // namespace
}  // namespace lmf::experiments
