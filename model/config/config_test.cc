// Tests of ModelConfig: the reference factories validate, and each impossible shape is rejected with a
// message that names the offending field.
#include "model/config/config.h"

#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lmf::model {
namespace {

void ExpectRejected(const ModelConfig& config, const std::string& fragment) {
  const absl::Status status = config.Validate();
  EXPECT_FALSE(status.ok()) << config.DebugString();
  EXPECT_NE(std::string(status.message()).find(fragment), std::string::npos)
      << "message '" << status.message() << "' should mention '" << fragment << "'";
}

TEST(ModelConfigTest, ReferenceArchitecturesValidate) {
  const ModelConfig gpt2 = Gpt2Config(50304, 1024, 768, 12, 12);
  EXPECT_TRUE(gpt2.Validate().ok()) << gpt2.Validate();
  EXPECT_EQ(gpt2.d_ff, 3072);
  EXPECT_EQ(gpt2.head_size(), 64);
  EXPECT_EQ(gpt2.norm, NormKind::kLayerNorm);
  EXPECT_EQ(gpt2.ffn, FfnKind::kGELU);
  EXPECT_EQ(gpt2.positions, PositionKind::kLearned);
  EXPECT_TRUE(gpt2.biases);
  EXPECT_TRUE(gpt2.tied_embeddings);

  const ModelConfig cs336 = Cs336Config(10000, 256, 512, 4, 16, 1344);
  EXPECT_TRUE(cs336.Validate().ok()) << cs336.Validate();
  EXPECT_EQ(cs336.norm, NormKind::kRMSNorm);
  EXPECT_EQ(cs336.ffn, FfnKind::kSwiGLU);
  EXPECT_EQ(cs336.positions, PositionKind::kRoPE);
  EXPECT_FALSE(cs336.biases);
  EXPECT_FALSE(cs336.tied_embeddings);
  EXPECT_EQ(cs336.n_kv_heads, 16);
}

TEST(ModelConfigTest, GroupedAndMultiQueryAttentionValidate) {
  ModelConfig c = Cs336Config(1000, 128, 256, 2, 8, 512);
  c.n_kv_heads = 2;
  EXPECT_TRUE(c.Validate().ok());
  c.n_kv_heads = 1;
  EXPECT_TRUE(c.Validate().ok());
}

TEST(ModelConfigTest, RejectsHeadsNotDividingWidth) {
  ModelConfig c = Cs336Config(1000, 128, 1000, 2, 12, 512);
  ExpectRejected(c, "n_heads=12 does not divide d_model=1000");
}

TEST(ModelConfigTest, RejectsKvHeadsNotDividingHeads) {
  ModelConfig c = Cs336Config(1000, 128, 384, 2, 12, 512);
  c.n_kv_heads = 5;
  ExpectRejected(c, "n_kv_heads=5 does not divide n_heads=12");
  c.n_kv_heads = 24;
  ExpectRejected(c, "n_kv_heads=24 is more than n_heads=12");
}

TEST(ModelConfigTest, RejectsOddHeadSizeWithRope) {
  ModelConfig c = Cs336Config(1000, 128, 36, 2, 4, 64);  // head size 9
  ExpectRejected(c, "positions=ROPE needs an even head size, but d_model=36 / n_heads=4 = 9");
  c.positions = PositionKind::kLearned;  // odd head sizes are fine without RoPE
  EXPECT_TRUE(c.Validate().ok());
}

TEST(ModelConfigTest, RejectsNonPositiveSizes) {
  ModelConfig c = Gpt2Config(0, 128, 64, 2, 4);
  ExpectRejected(c, "vocab_size=0 must be positive");
  c = Gpt2Config(100, 128, 64, 0, 4);
  ExpectRejected(c, "n_layers=0 must be positive");
  c = Gpt2Config(100, 128, 64, 2, 4);
  c.d_ff = -1;
  ExpectRejected(c, "d_ff=-1 must be positive");
}

TEST(ModelConfigTest, PaddedVocabularyMustCoverTheVocabulary) {
  ModelConfig c = Gpt2Config(50257, 1024, 768, 12, 12);
  c.padded_vocab_size = 50304;
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.vocab_rows(), 50304);
  c.padded_vocab_size = 50000;
  ExpectRejected(c, "padded_vocab_size=50000 must be 0 (no padding) or at least vocab_size=50257");
  c.padded_vocab_size = 0;
  EXPECT_EQ(c.vocab_rows(), 50257);
}

TEST(ModelConfigTest, RejectsBadScalars) {
  ModelConfig c = Cs336Config(1000, 128, 64, 2, 4, 128);
  c.norm_eps = 0;
  ExpectRejected(c, "norm_eps");
  c = Cs336Config(1000, 128, 64, 2, 4, 128, /*rope_theta=*/0.5);
  ExpectRejected(c, "rope_theta");
  c = Gpt2Config(100, 128, 64, 2, 4);
  c.init_std = -0.02;
  ExpectRejected(c, "init_std");
}

TEST(ModelConfigTest, RejectsAMatrixOf2To31ElementsNamingIt) {
  // (vocab, context, d_model, layers, heads, d_ff)
  ExpectRejected(Cs336Config(1000, 1 << 24, 64, 2, 4, 172),
                 "one sequence's FFN activations (context_length x d_ff) is 16777216 x 172, 2^31 or more");
  ExpectRejected(Cs336Config(1 << 22, 128, 512, 2, 4, 1024),
                 "the embedding (vocab rows x d_model) is 4194304 x 512");
  ExpectRejected(Cs336Config(1000, 128, 64, 2, 4, 1 << 25),
                 "an FFN weight (d_ff x d_model) is 33554432 x 64");
  // q and the output projection are d_model x d_model: 1048576^2 = 2^40 (and 13 TB with its moments), where
  // every other matrix of this config is small enough.
  ExpectRejected(
      Cs336Config(512, 32, 1 << 20, 2, 4, 172),
      "an attention projection (n_heads * head size x d_model) is 1048576 x 1048576, 2^31 or more");
  ExpectRejected(Cs336Config(512, 32, 46342, 1, 1, 172), "an attention projection");  // 46342^2 > 2^31
  EXPECT_TRUE(Cs336Config(512, 32, 46340, 1, 1, 172).Validate().ok());                // 46340^2 < 2^31
  // Products past int64 are still caught.
  ModelConfig huge = Cs336Config(1000, 128, 64, 2, 4, 128);
  huge.d_ff = int64_t{1} << 40;
  huge.context_length = int64_t{1} << 40;
  ExpectRejected(huge, "2^31 or more");
  const ModelConfig fits = Cs336Config(1000, (1 << 24) - 1, 64, 2, 4, 128);  // (2^24 - 1) x 128 < 2^31
  EXPECT_TRUE(fits.Validate().ok()) << fits.Validate();
}

TEST(ModelConfigTest, MupNeedsABaseWidthAndUntiedEmbeddings) {
  ModelConfig c = Cs336Config(97, 16, 256, 2, 16, 1024);
  c.init = InitScheme::kMup;
  ExpectRejected(c, "mup_base_d_model=0 must be positive with init=MUP");
  c.mup_base_d_model = 64;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  EXPECT_EQ(c.mup_width_multiplier(), 4.0);
  c.tied_embeddings = true;
  ExpectRejected(c, "init=MUP needs tied_embeddings=false");
  c.init = InitScheme::kGpt2Scaled;  // the base width is ignored by the other schemes
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  EXPECT_EQ(c.mup_width_multiplier(), 1.0);
}

// Decoding past the context needs every layer windowed within the context and no position table.
TEST(ModelConfigTest, DecodesPastContextOnlyWithEveryLayerWindowedAndNoTable) {
  ModelConfig c = Cs336Config(97, 16, 32, 3, 4, 64);  // RoPE
  EXPECT_FALSE(c.decodes_past_context());             // no window
  c.sliding_window = 4;
  EXPECT_TRUE(c.decodes_past_context());
  c.sliding_window = 16;  // as long as the context: a ring of 16 rows
  EXPECT_TRUE(c.decodes_past_context());
  c.sliding_window = 17;  // longer than the context: the cache keeps 16 rows, too few past it
  EXPECT_FALSE(c.decodes_past_context());
  c.sliding_window = 4;
  c.global_every = 3;  // layer 3 global
  EXPECT_FALSE(c.decodes_past_context());
  c.global_every = 4;  // past the last layer: none global
  EXPECT_TRUE(c.decodes_past_context());
  c.positions = PositionKind::kNone;
  EXPECT_TRUE(c.decodes_past_context());
  for (PositionKind table : {PositionKind::kLearned, PositionKind::kSinusoidal}) {
    c.positions = table;
    EXPECT_FALSE(c.decodes_past_context());
  }
}

TEST(ModelConfigTest, ParallelBlocksArePreNormOnly) {
  ModelConfig c = Gpt2Config(100, 128, 64, 2, 4);
  c.parallel_block = true;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  for (NormPlacement placement : {NormPlacement::kPost, NormPlacement::kDouble}) {
    c.norm_placement = placement;
    ExpectRejected(
        c, absl::StrCat("parallel_block=true needs norm_placement=PRE, not ",
                        absl::AsciiStrToUpper(NormPlacementName(placement))));
    c.parallel_block = false;
    EXPECT_TRUE(c.Validate().ok()) << c.Validate();
    c.parallel_block = true;
  }
}

TEST(ModelConfigTest, SlidingWindowWithinTheContext) {
  ModelConfig c = Cs336Config(97, 16, 32, 3, 4, 64);
  c.sliding_window = 16;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.sliding_window = 17;
  ExpectRejected(c, "sliding_window=17 exceeds context_length=16");
  c.sliding_window = -1;
  ExpectRejected(c, "sliding_window=-1 must not be negative");
  c.sliding_window = 4;
  c.global_every = -2;
  ExpectRejected(c, "global_every=-2 must not be negative");
}

// Every problem is reported, each once, in one message per line.
TEST(ModelConfigTest, ReportsEveryProblem) {
  ModelConfig c = Cs336Config(1000, 128, 1000, 2, 12, 512);
  c.z_loss = -1;
  EXPECT_EQ(c.Problems(),
            (std::vector<std::string>{"n_heads=12 does not divide d_model=1000",
                                      "z_loss=-1 must be a finite number >= 0 (0 turns it off)"}));
  EXPECT_EQ(c.Validate().message(),
            "model config: n_heads=12 does not divide d_model=1000\n"
            "model config: z_loss=-1 must be a finite number >= 0 (0 turns it off)");
  EXPECT_TRUE(Cs336Config(1000, 128, 64, 2, 4, 128).Problems().empty());
}

// A namer gives the members the names a config writes, and leaves out the members its caller reported.
TEST(ModelConfigTest, NamerNamesTheFieldsAndSkipsTheRulesOnMembersLeftOut) {
  ModelConfig c = Cs336Config(1000, 128, 64, 2, 0, 128);  // n_heads=0: left out below
  c.n_kv_heads = 0;
  c.d_ff = -1;
  c.parallel_block = true;
  c.norm_placement = NormPlacement::kPost;
  const ModelFieldNamer namer = [](std::string_view member) -> std::optional<std::string> {
    if (member == "n_heads" || member == "n_kv_heads") return std::nullopt;
    if (member == "d_ff") return std::string("model.ffn.d_ff");
    if (member == "norm_placement") return std::string("model.norm.placement");
    return "model." + std::string(member);
  };
  EXPECT_EQ(c.Problems(namer),
            (std::vector<std::string>{"model.ffn.d_ff=-1 must be positive",
                                      "model.parallel_block=true needs model.norm.placement=PRE, not POST "
                                      "(the two branches read one normed block input)"}));
}

// A member left out only skips the rules on it: an oversized embedding is reported with d_ff left out.
TEST(ModelConfigTest, NamerSkipsOnlyTheRulesOnTheMembersLeftOut) {
  ModelConfig c = Cs336Config(1 << 22, 128, 512, 2, 4, 0);
  const ModelFieldNamer namer = [](std::string_view member) -> std::optional<std::string> {
    if (member == "d_ff") return std::nullopt;
    return "model." + std::string(member);
  };
  EXPECT_EQ(c.Problems(namer),
            (std::vector<std::string>{"the embedding (vocab rows x d_model) is 4194304 x 512, 2^31 or more "
                                      "elements (model.vocab_size=4194304, model.d_model=512)"}));
}

TEST(ModelConfigTest, RejectsSequenceLongerThanPositionTable) {
  const ModelConfig c = Gpt2Config(100, 16, 64, 2, 4);
  EXPECT_TRUE(c.ValidateSequenceLength(16).ok());
  const absl::Status status = c.ValidateSequenceLength(17);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(std::string(status.message()).find("sequence length 17 is longer than context_length=16"),
            std::string::npos)
      << status;
}

ModelConfig MoeModel() {
  ModelConfig c = Cs336Config(100, 16, 32, 4, 4, 64);
  MoeSpec moe;
  moe.n_experts = 8, moe.top_k = 2, moe.d_expert = 16;
  c.moe = moe;
  return c;
}

TEST(ModelConfigTest, MixtureOfExpertsRules) {
  EXPECT_TRUE(MoeModel().Validate().ok()) << MoeModel().Validate();
  ModelConfig c = MoeModel();
  c.d_ff = 0;  // no layer is dense: d_ff is unused
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.first_k_dense = 1;
  ExpectRejected(c, "d_ff=0 must be positive");
  c = MoeModel();
  c.moe->top_k = 9;
  ExpectRejected(c, "moe.top_k=9 is more than moe.n_experts=8");
  c = MoeModel();
  c.moe->n_experts = 0, c.moe->d_expert = -1;
  ExpectRejected(c, "moe.n_experts=0 must be positive");
  ExpectRejected(c, "moe.d_expert=-1 must be positive");
  c = MoeModel();
  c.moe->n_groups = 3;
  ExpectRejected(c, "moe.n_groups=3 must be positive and divide moe.n_experts=8");
  c.moe->n_groups = 4, c.moe->topk_groups = 5;
  ExpectRejected(c, "moe.topk_groups=5 must be in [1, moe.n_groups=4]");
  c.moe->topk_groups = 1, c.moe->top_k = 3;
  ExpectRejected(c, "moe.top_k=3 is more than the 2 experts of moe.topk_groups=1 groups of 2");
  c = MoeModel();
  c.moe->route_scale = 0;
  ExpectRejected(c, "moe.route_scale=0 must be a positive finite number");
  c = MoeModel();
  c.moe->capacity_factor = -1, c.moe->aux_loss = std::nan(""), c.moe->router_z_loss = -0.5;
  ExpectRejected(c, "moe.capacity_factor=-1 must be a finite number >= 0");
  ExpectRejected(c, "moe.aux_loss=nan must be a finite number >= 0");
  ExpectRejected(c, "moe.router_z_loss=-0.5 must be a finite number >= 0");
  c = MoeModel();
  c.moe->router = RouterKind::kTopKSoftmax, c.moe->normalize_gates = true;
  ExpectRejected(c, "moe.normalize_gates=true with moe.router=TOPK_SOFTMAX");
  c = MoeModel();
  c.first_k_dense = 5;
  ExpectRejected(c, "first_k_dense=5 must be in [0, n_layers=4]");
  c = Cs336Config(100, 16, 32, 4, 4, 64);
  c.first_k_dense = 1;
  ExpectRejected(c, "first_k_dense=1 needs a moe");
  c = MoeModel();
  c.layer_pattern = {c.layer(0)};
  ExpectRejected(c, "moe sets the default layers' channel mixer; with layer_pattern");
}

TEST(ModelConfigTest, LayerPatternEntriesOfMoeAreCheckedByTheirPath) {
  ModelConfig c = Cs336Config(100, 16, 32, 2, 4, 64);
  LayerSpec dense = c.layer(0), moe = c.layer(0);
  moe.channel_mixer.kind = ChannelMixerSpec::Kind::kMoe;
  moe.channel_mixer.moe.n_experts = 4, moe.channel_mixer.moe.top_k = 5, moe.channel_mixer.moe.d_expert = 8;
  c.layer_pattern = {dense, moe};
  ExpectRejected(c, "layer_pattern[1].moe.top_k=5 is more than layer_pattern[1].moe.n_experts=4");
}

TEST(ModelConfigTest, FirstKDenseLayersKeepTheFeedForward) {
  ModelConfig c = MoeModel();
  c.n_layers = 7, c.first_k_dense = 2, c.sliding_window = 4, c.global_every = 3;
  for (int64_t i = 0; i < c.n_layers; ++i) {
    EXPECT_EQ(c.layer(i).channel_mixer.kind,
              i < 2 ? ChannelMixerSpec::Kind::kFeedForward : ChannelMixerSpec::Kind::kMoe) << i;
  }
  // The groups: layers 0-1 dense (layer 2 is the first global one), then 2-6 MoE: local 3, 4, 6 and
  // global 2, 5; each group's spec is one of its layers'.
  int64_t dense = 0, moe_local = 0, moe_global = 0, total = 0;
  for (const ModelConfig::LayerGroup& g : c.layer_groups()) {
    total += g.count;
    if (g.spec.channel_mixer.kind == ChannelMixerSpec::Kind::kFeedForward) {
      dense += g.count;
      EXPECT_EQ(g.spec.token_mixer.attention.window, 4);
    } else if (g.spec.token_mixer.attention.window == 0) {
      moe_global += g.count;
    } else {
      moe_local += g.count;
    }
  }
  EXPECT_EQ(total, 7);
  EXPECT_EQ(dense, 2);
  EXPECT_EQ(moe_local, 3);
  EXPECT_EQ(moe_global, 2);
}

TEST(ModelConfigTest, DebugStringNamesTheChoices) {
  const std::string s = Cs336Config(10000, 256, 512, 4, 16, 1344).DebugString();
  EXPECT_NE(s.find("d_model=512"), std::string::npos) << s;
  EXPECT_NE(s.find("ffn=swiglu"), std::string::npos) << s;
  EXPECT_NE(s.find("positions=rope"), std::string::npos) << s;
}

}  // namespace
}  // namespace lmf::model
