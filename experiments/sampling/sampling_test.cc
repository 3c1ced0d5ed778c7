// Token sampling: greedy at temperature 0, nucleus truncation, frequencies that follow the softmax,
// reproducibility from a seed; and generation stopping at the stop token or the limit.
#include "experiments/sampling/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
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

// SampleToken as it reads: every token sorted, the nucleus summed and walked in that order.
int32_t SampleBySortingEverything(const std::vector<float>& logits, const SamplingOptions& options,
                                  uint64_t draw) {
  const int64_t v = static_cast<int64_t>(logits.size());
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> probs(v);
  double total = 0;
  for (int64_t i = 0; i < v; ++i) total += probs[i] = std::exp((logits[i] - max_logit) / options.temperature);
  std::vector<int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return probs[a] != probs[b] ? probs[a] > probs[b] : a < b; });
  int64_t kept = 0;
  double kept_mass = 0;
  while (kept < v && (kept == 0 || kept_mass < options.top_p * total)) kept_mass += probs[order[kept++]];
  const double target = Uniform(options.seed, draw) * kept_mass;
  double cumulative = 0;
  for (int64_t i = 0; i < kept; ++i) {
    cumulative += probs[order[i]];
    if (target < cumulative) return order[i];
  }
  return order[kept - 1];
}

// SampleToken sorts only the head of the order, a chunk at a time; its draws must be those of sorting
// everything, bit for bit: vocabularies around the chunk sizes (64, 128, ...) and GPT-2's, peaked and flat
// distributions, ties (logits from a few values), every top_p from a sliver to all.
TEST(SampleToken, DrawsAreThoseOfSortingTheWholeVocabulary) {
  std::mt19937 rng(17);
  int checked = 0;
  for (int64_t v : {1, 2, 63, 64, 65, 127, 128, 129, 300, 1000, 50257}) {
    for (double spread : {0.1, 2.0, 12.0}) {
      for (bool ties : {false, true}) {
        std::normal_distribution<float> normal(0.0f, static_cast<float>(spread));
        std::vector<float> logits(v);
        for (float& x : logits) x = ties ? std::round(normal(rng)) : normal(rng);
        for (double top_p : {0.05, 0.5, 0.9, 0.95, 0.999, 1.0}) {
          SamplingOptions options;
          options.temperature = spread > 5 ? 2.0 : 0.8;
          options.top_p = top_p;
          options.seed = static_cast<uint64_t>(v) * 31 + checked;
          for (uint64_t d = 0; d < (v > 1000 ? 3u : 20u); ++d, ++checked) {
            ASSERT_EQ(SampleToken(logits.data(), v, options, d),
                      SampleBySortingEverything(logits, options, d))
                << "v " << v << " spread " << spread << " ties " << ties << " top_p " << top_p << " draw "
                << d;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 2000);
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
