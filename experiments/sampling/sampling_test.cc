// Token sampling: greedy at temperature 0, nucleus truncation, frequencies that follow the softmax,
// reproducibility from a seed; and generation stopping at the stop token or the limit.
#include "experiments/sampling/sampling.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/config/config.h"

namespace lmf::experiments {
namespace {

TEST(SampleToken, TemperatureZeroIsArgmax) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
  SamplingOptions greedy;
  greedy.temperature = 0;
  for (uint64_t d = 0; d < 10; ++d) EXPECT_EQ(SampleToken(logits.data(), 4, greedy, d), 1);
}

TEST(SampleToken, TopPKeepsOnlyTheNucleus) {
  // Probabilities ~ [0.64, 0.24, 0.09, 0.03]: top_p 0.7 keeps the first two only.
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  SamplingOptions options;
  options.top_p = 0.7;
  options.seed = 3;
  for (uint64_t d = 0; d < 2000; ++d) EXPECT_LT(SampleToken(logits.data(), 4, options, d), 2);
}

TEST(SampleToken, FrequenciesFollowTheSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f};
  SamplingOptions options;
  options.seed = 11;
  options.temperature = 1.0;
  std::vector<int> counts(3);
  const int draws = 20000;
  for (int d = 0; d < draws; ++d) ++counts[SampleToken(logits.data(), 3, options, d)];
  const double z = std::exp(1.0) + 1.0 + std::exp(-1.0);
  const double expected[3] = {std::exp(1.0) / z, 1.0 / z, std::exp(-1.0) / z};
  for (int i = 0; i < 3; ++i) {
    // Binomial standard deviation at 20000 draws is below 0.0035; allow 4 of them.
    EXPECT_NEAR(counts[i] / static_cast<double>(draws), expected[i], 0.014) << i;
  }
}

TEST(SampleToken, HigherTemperatureFlattens) {
  const std::vector<float> logits = {2.0f, 0.0f};
  SamplingOptions cold, hot;
  cold.temperature = 0.5;
  hot.temperature = 4.0;
  int cold_second = 0, hot_second = 0;
  for (int d = 0; d < 5000; ++d) {
    cold_second += SampleToken(logits.data(), 2, cold, d);
    hot_second += SampleToken(logits.data(), 2, hot, d);
  }
  // p(second) = 1 / (1 + e^(2/T)): 0.018 at T = 0.5, 0.38 at T = 4.
  EXPECT_LT(cold_second, 200);
  EXPECT_GT(hot_second, 1500);
}

TEST(Generate, StopsAtTheLimitAndIsReproducible) {
  auto model = model::LanguageModel::Create(model::Cs336Config(64, 16, 32, 2, 4, 64), kernels::Context::Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  (*model)->InitializeParameters(5);
  GenerateOptions options;
  options.max_new_tokens = 40;  // longer than the context: the window slides
  options.sampling.seed = 9;
  auto a = Generate(**model, {1, 2, 3}, options, nullptr);
  auto b = Generate(**model, {1, 2, 3}, options, nullptr);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 40u);
  EXPECT_EQ(*a, *b);
  // With the first generated token as the stop token, generation ends before emitting it.
  options.stop_token = (*a)[0];
  auto stopped = Generate(**model, {1, 2, 3}, options, nullptr);
  ASSERT_TRUE(stopped.ok());
  EXPECT_TRUE(stopped->empty());
}

TEST(Generate, VocabLimitKeepsIdsDecodable) {
  auto model = model::LanguageModel::Create(model::Cs336Config(64, 16, 32, 2, 4, 64), kernels::Context::Cpu());
  ASSERT_TRUE(model.ok()) << model.status();
  (*model)->InitializeParameters(5);
  GenerateOptions options;
  options.max_new_tokens = 200;
  options.sampling.temperature = 2.0;  // flat: without the limit, ids >= 10 would be drawn almost always
  options.vocab_limit = 10;
  auto ids = Generate(**model, {1, 2, 3}, options, nullptr);
  ASSERT_TRUE(ids.ok()) << ids.status();
  for (int32_t id : *ids) ASSERT_LT(id, 10);
}

}  // namespace
}  // namespace lmf::experiments
