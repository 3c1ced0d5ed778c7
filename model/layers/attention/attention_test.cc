// Tests of the attention token mixer through the layer checks (finite differences, micro-batches held at
// once, recomputation, declared bytes) for each of its options, and of its KV-cache decode against its
// forward. Its numbers against PyTorch are checked at the model level (model/language_model's fixtures).
#include "model/layers/attention/attention.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/testing/layer_check.h"

namespace lmf::model {
namespace {

using testing::UnderTest;

struct Case {
  std::string name;
  AttentionSpec spec;
  PositionKind positions = PositionKind::kRoPE;
  NormKind norm = NormKind::kRMSNorm;
  bool biases = false;
};

// C = 16: heads of 4 (GQA: 4 query heads over 2 key/value heads), or 2 heads of 8.
std::vector<Case> Cases() {
  return {
      {"gqa_rope", {4, 2, 0, 0.0, false}},
      {"mha_learned_positions_biases", {2, 2, 0, 0.0, false}, PositionKind::kLearned, NormKind::kLayerNorm, true},
      {"mqa_window", {4, 1, 3, 0.0, false}},
      {"softcap", {4, 2, 0, 1.5, false}},
      {"qk_norm_rms", {4, 2, 0, 0.0, true}},
      {"qk_norm_layernorm_biases", {2, 1, 2, 0.0, true}, PositionKind::kNone, NormKind::kLayerNorm, true},
  };
}

ModelConfig ModelFor(const Case& c) {
  ModelConfig m = Cs336Config(/*vocab_size=*/32, /*context_length=*/16, /*d_model=*/16, /*n_layers=*/1,
                              c.spec.n_heads, /*d_ff=*/32);
  m.n_kv_heads = c.spec.n_kv_heads;
  m.positions = c.positions;
  m.norm = c.norm;
  m.biases = c.biases;
  return m;
}

class AttentionChecks : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionChecks, PassTheLayerChecks) {
  const Case& c = GetParam();
  const ModelConfig model = ModelFor(c);
  ASSERT_TRUE(model.Validate().ok()) << model.Validate();
  const kernels::Context ctx = kernels::Context::Cpu();
  StepCounters counters;
  const Attention attention(c.spec, model, ctx, kernels::DType::kF32, &counters);
  const testing::MixerUnderTest layer = UnderTest(c.name, attention, model.d_model, ctx);
  testing::ExpectGradientsMatchFiniteDifferences(layer, /*b=*/2, /*t=*/5, /*seed=*/11);
  testing::ExpectMicroBatchesIndependent(layer, /*b=*/2, /*t=*/6, /*micro_batches=*/4, /*seed=*/12);
  testing::ExpectRecomputeIsExact(layer, /*b=*/2, /*t=*/6, /*seed=*/13);
  testing::ExpectSavedBytes(layer, /*b=*/2, /*t=*/6,
                            Attention::SavedBytesPerToken(c.spec, model, kernels::DType::kF32));
}

INSTANTIATE_TEST_SUITE_P(Options, AttentionChecks, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// A prefill of T tokens and one decoded token per position after it give the rows a forward over the whole
// sequence gives (the decode attends over the cache, a ring for a window shorter than the context).
TEST(AttentionDecode, MatchesTheForwardAtEveryPosition) {
  for (const Case& c : Cases()) {
    const ModelConfig model = ModelFor(c);
    const kernels::Context ctx = kernels::Context::Cpu();
    StepCounters counters;
    const Attention attention(c.spec, model, ctx, kernels::DType::kF32, &counters);
    const testing::MixerUnderTest layer = UnderTest(c.name, attention, model.d_model, ctx);
    testing::RandomizeParameters(layer, 5, 0.3);
    const int64_t b = 2, t = 9, prompt = 4, channels = model.d_model;
    std::mt19937_64 engine(3);
    std::normal_distribution<double> normal;
    std::vector<float> h(static_cast<size_t>(b * t * channels));
    for (float& x : h) x = static_cast<float>(normal(engine));
    std::vector<float> whole(h.size());
    std::unique_ptr<LayerActivations> saved = attention.NewActivations();
    attention.Forward(ctx, b, t, h.data(), whole.data(), /*accumulate=*/false, *saved);

    // The prompt: the first `prompt` positions of each sequence, contiguous.
    std::vector<float> prompt_h(static_cast<size_t>(b * prompt * channels)), prompt_out(prompt_h.size());
    for (int64_t s = 0; s < b; ++s) {
      std::memcpy(&prompt_h[s * prompt * channels], &h[s * t * channels], prompt * channels * sizeof(float));
    }
    std::unique_ptr<DecodeState> cache = attention.NewDecodeState(ctx, b, model.context_length);
    EXPECT_EQ(cache->bytes(), attention.DecodeStateBytes(b, model.context_length)) << c.name;
    std::unique_ptr<LayerActivations> scratch = attention.NewActivations();
    attention.Forward(ctx, b, prompt, prompt_h.data(), prompt_out.data(), /*accumulate=*/false, *scratch,
                      cache.get());
    int32_t position32 = 0;
    for (int64_t p = prompt; p < t; ++p) {
      std::vector<float> token(static_cast<size_t>(b * channels)), out(token.size());
      for (int64_t s = 0; s < b; ++s) {
        std::memcpy(&token[s * channels], &h[(s * t + p) * channels], channels * sizeof(float));
      }
      position32 = static_cast<int32_t>(p);
      attention.Decode(ctx, b, p, &position32, token.data(), out.data(), /*accumulate=*/false, *cache, *scratch);
      for (int64_t s = 0; s < b; ++s) {
        for (int64_t i = 0; i < channels; ++i) {
          const float want = whole[(s * t + p) * channels + i];
          EXPECT_NEAR(out[s * channels + i], want, 1e-5 * (1 + std::fabs(want)))
              << c.name << ": sequence " << s << ", position " << p << ", channel " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace lmf::model
