// The KV-cache decoder against the model's own forward: for each architecture variant, the logits after
// feeding tokens one at a time equal LanguageModel::Forward's logits at every position of the sequence.
// And greedy generation with the cache equals greedy generation by full recomputation.
#include "experiments/sampling/kv_cache_decoder.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "experiments/sampling/sampling.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"

namespace lmf::experiments {
namespace {

std::unique_ptr<model::LanguageModel> Make(const model::ModelConfig& config, uint64_t seed) {
  auto m = model::LanguageModel::Create(config, kernels::Context::Cpu());
  EXPECT_TRUE(m.ok()) << m.status();
  (*m)->InitializeParameters(seed);
  // Non-trivial norm gains and biases, so that a wrong or missing one shows.
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> jitter(-0.2f, 0.2f);
  (*m)->VisitParameters([&](const std::string& name, const model::Parameter& p) {
    if (p.value.rank() == 1) {
      for (int64_t i = 0; i < p.value.numel(); ++i) p.data()[i] += jitter(rng);
    }
    (void)name;
  });
  return *std::move(m);
}

void ExpectDecoderMatchesForward(const model::ModelConfig& config) {
  auto model = Make(config, 7);
  std::mt19937 rng(3);
  const int64_t t = config.context_length;
  std::vector<int32_t> ids(t);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % config.vocab_size);
  ASSERT_TRUE(model->Forward(ids.data(), 1, t).ok());
  const std::vector<float> expected(model->logits(), model->logits() + t * config.vocab_size);
  KvCacheDecoder decoder(*model);
  float worst = 0;
  for (int64_t pos = 0; pos < t; ++pos) {
    auto logits = decoder.Step(ids[pos]);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (int64_t i = 0; i < config.vocab_size; ++i) {
      worst = std::max(worst, std::fabs((*logits)[i] - expected[pos * config.vocab_size + i]));
    }
  }
  // fp32, different summation orders (sgemv vs the model's GEMM, online vs direct softmax): logits of
  // magnitude ~1-10 agree to a few 1e-6; 1e-4 still catches any wrong formula (those are off by >1e-2).
  EXPECT_LT(worst, 1e-4) << config.DebugString();
  EXPECT_EQ(decoder.Step(ids[0]).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(KvCacheDecoder, MatchesForwardLlamaStyleWithGqa) {
  model::ModelConfig config = model::Cs336Config(97, 12, 48, 2, 6, 80);
  config.n_kv_heads = 2;
  ExpectDecoderMatchesForward(config);
}

TEST(KvCacheDecoder, MatchesForwardGpt2Style) {
  ExpectDecoderMatchesForward(model::Gpt2Config(97, 12, 48, 2, 4));
}

TEST(KvCacheDecoder, MatchesForwardSinusoidalReluUntiedBiases) {
  model::ModelConfig config = model::Cs336Config(61, 10, 32, 2, 4, 64);
  config.positions = model::PositionKind::kSinusoidal;
  config.ffn = model::FfnKind::kReLU;
  config.biases = true;
  config.norm = model::NormKind::kLayerNorm;
  ExpectDecoderMatchesForward(config);
}

TEST(KvCacheDecoder, MatchesForwardWithoutPositions) {
  model::ModelConfig config = model::Cs336Config(61, 10, 32, 1, 2, 64);
  config.positions = model::PositionKind::kNone;
  config.ffn = model::FfnKind::kGELU;
  ExpectDecoderMatchesForward(config);
}

TEST(KvCacheDecoder, RejectsIdsOutsideTheVocabulary) {
  auto model = Make(model::Cs336Config(61, 10, 32, 1, 2, 64), 1);
  KvCacheDecoder decoder(*model);
  EXPECT_EQ(decoder.Step(61).status().message(), "token id 61 is outside [0, 61)");
  EXPECT_EQ(decoder.Step(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder.length(), 0);
}

TEST(Generate, GreedyWithTheCacheEqualsFullRecomputation) {
  auto model = Make(model::Cs336Config(64, 24, 32, 2, 4, 64), 5);
  GenerateOptions options;
  options.sampling.temperature = 0;
  options.max_new_tokens = 20;  // 4 prompt + 20 = 24 = context: no refill
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  auto cached = Generate(*model, prompt, options, nullptr);
  ASSERT_TRUE(cached.ok()) << cached.status();
  std::vector<int32_t> ids = prompt;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(model->Forward(ids.data(), 1, static_cast<int64_t>(ids.size())).ok());
    const float* last = model->logits() + (ids.size() - 1) * 64;
    ids.push_back(static_cast<int32_t>(std::max_element(last, last + 64) - last));
  }
  EXPECT_EQ(*cached, std::vector<int32_t>(ids.begin() + 4, ids.end()));
}

}  // namespace
}  // namespace lmf::experiments
