// Generate over the model's incremental forward against recomputing the full forward for every new token:
// greedy generation gives the same ids within the context, and past it, where the cache restarts from the
// newest half of the window, the same ids as the full forward over that same window; a model whose every
// layer is windowed decodes on past the context instead. (That the incremental
// logits equal LanguageModel::Forward at every position, for every architecture variant, is
// model/language_model/language_model_decode_test.)
#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "experiments/sampling/sampling.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {
namespace {

std::unique_ptr<model::LanguageModel> Make(const model::ModelConfig& config, uint64_t seed) {
  auto m = model::LanguageModel::Create(config, kernels::Context::Cpu());
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  (*m)->InitializeParameters(seed);
  return std::move(*m);
}

// The argmax of the full forward's last logits over `window`.
int32_t GreedyByRecomputation(model::LanguageModel& model, const std::vector<int32_t>& window) {
  const int64_t t = static_cast<int64_t>(window.size()), v = model.config().vocab_rows();
  EXPECT_TRUE(model.Forward(window.data(), 1, t).ok());
  const float* last = model.logits() + (t - 1) * v;
  return static_cast<int32_t>(std::max_element(last, last + model.config().vocab_size) - last);
}

TEST(Generate, GreedyWithTheCacheEqualsFullRecomputation) {
  auto model = Make(model::Cs336Config(64, 24, 32, 2, 4, 64), 5);
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.sampling.temperature = 0;
  options.max_new_tokens = 20;  // 4 prompt + 20 = 24 = context: no refill
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  auto cached = Generate(*model, prompt, options, nullptr);
  ASSERT_TRUE(cached.ok()) << cached.status();
  std::vector<int32_t> ids = prompt;
  for (int i = 0; i < 20; ++i) ids.push_back(GreedyByRecomputation(*model, ids));
  EXPECT_EQ(*cached, std::vector<int32_t>(ids.begin() + 4, ids.end()));
}

// A prompt longer than the context keeps its last context_length ids; a full cache restarts from the newest
// context_length / 2 ids, whose positions begin again at 0.
TEST(Generate, PastTheContextTheWindowRestartsFromItsNewestHalf) {
  const model::ModelConfig config = model::Cs336Config(64, 8, 32, 2, 4, 64);
  auto model = Make(config, 3);
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.sampling.temperature = 0;
  options.max_new_tokens = 30;
  const std::vector<int32_t> prompt = {5, 9, 1, 7, 3, 3, 8, 2, 6, 4};  // 10 ids > context 8
  auto cached = Generate(*model, prompt, options, nullptr);
  ASSERT_TRUE(cached.ok()) << cached.status();
  std::vector<int32_t> ids = prompt;
  int64_t window = config.context_length;  // ids in the cache
  for (int i = 0; i < 30; ++i) {
    ids.push_back(GreedyByRecomputation(*model, std::vector<int32_t>(ids.end() - window, ids.end())));
    window = window < config.context_length ? window + 1 : config.context_length / 2;
  }
  EXPECT_EQ(*cached, std::vector<int32_t>(ids.begin() + 10, ids.end()));
}

// The draw SampleToken makes from the full forward's last logits over `window`.
int32_t DrawByRecomputation(model::LanguageModel& model, const std::vector<int32_t>& window,
                            const SamplingOptions& sampling, uint64_t draw) {
  const int64_t t = static_cast<int64_t>(window.size()), v = model.config().vocab_rows();
  EXPECT_TRUE(model.Forward(window.data(), 1, t).ok());
  return SampleToken(model.logits() + (t - 1) * v, model.config().vocab_size, sampling, draw);
}

// A model whose every layer is windowed (RoPE) decodes on past its context without a refill: each new id is
// the draw from the full forward over the newest context_length ids (two layers of window 4 see the last 7
// tokens, inside the context of 8, at the same offsets wherever they stand). Sampled at temperature 1 (a
// random model's greedy ids soon repeat one token, which every rule reproduces); the refilling rule, whose
// windows shrink to 4 tokens, draws other ids, so the test tells the two apart.
TEST(Generate, AWindowedModelDecodesOnPastTheContext) {
  model::ModelConfig config = model::Cs336Config(64, 8, 32, 2, 4, 64);
  config.sliding_window = 4;
  auto model = Make(config, 3);
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.sampling.seed = 12;
  options.max_new_tokens = 30;
  const std::vector<int32_t> prompt = {5, 9, 1, 7, 3, 3, 8, 2, 6, 4};  // 10 ids > context 8
  auto cached = Generate(*model, prompt, options, nullptr);
  ASSERT_TRUE(cached.ok()) << cached.status();
  const int64_t context = config.context_length;
  std::vector<int32_t> ids = prompt, refilled = prompt;
  int64_t window = context;  // ids in a refilling cache
  for (uint64_t i = 0; i < 30; ++i) {
    ids.push_back(DrawByRecomputation(*model, std::vector<int32_t>(ids.end() - context, ids.end()),
                                      options.sampling, i));
    refilled.push_back(DrawByRecomputation(
        *model, std::vector<int32_t>(refilled.end() - window, refilled.end()), options.sampling, i));
    window = window < context ? window + 1 : context / 2;
  }
  EXPECT_EQ(*cached, std::vector<int32_t>(ids.begin() + 10, ids.end()));
  EXPECT_NE(refilled, ids);
}

// Samples drawn as one batch are the single generations with consecutive seeds, through a refill of the
// cache (a prompt of 6 ids and a context of 8) and with samples ending at different steps: the stop token is
// the fourth id of seed 7's generation, so that sample ends there while the others go on (their ids equal
// single generations with the same stop token). Checked on the CPU, where a batch of 3 and a batch of 1 give
// the same logits here.
TEST(Generate, BatchedSamplesAreTheSingleGenerationsOfConsecutiveSeeds) {
  auto model = Make(model::Cs336Config(64, 8, 32, 2, 4, 64), 11);
  ASSERT_NE(model, nullptr);
  GenerateOptions options;
  options.sampling.temperature = 1.0;
  options.sampling.top_p = 0.9;
  options.sampling.seed = 7;
  options.max_new_tokens = 46;
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9};
  auto first = Generate(*model, prompt, options, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_GT(first->size(), 4u);
  options.stop_token = (*first)[3];

  std::vector<std::vector<int32_t>> streamed(3);
  auto samples = GenerateSamples(*model, prompt, options, 3, [&](int64_t s, int32_t id) {
    streamed[static_cast<size_t>(s)].push_back(id);
  });
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 3u);
  EXPECT_EQ(*samples, streamed);
  EXPECT_EQ((*samples)[0], std::vector<int32_t>(first->begin(), first->begin() + 3));
  bool one_went_past_the_context = false;
  std::set<size_t> lengths;
  for (uint64_t s = 0; s < 3; ++s) {
    GenerateOptions single = options;
    single.sampling.seed = options.sampling.seed + s;
    auto alone = Generate(*model, prompt, single, nullptr);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ((*samples)[s], *alone) << "sample " << s;
    one_went_past_the_context |= prompt.size() + alone->size() > 8;
    lengths.insert(alone->size());
  }
  EXPECT_TRUE(one_went_past_the_context);  // the batched refill ran
  EXPECT_GT(lengths.size(), 1u);           // the samples ended at different steps
}

TEST(Generate, SamplesNeedAPositiveCount) {
  auto model = Make(model::Cs336Config(64, 8, 32, 1, 4, 64), 1);
  ASSERT_NE(model, nullptr);
  auto samples = GenerateSamples(*model, {1, 2}, GenerateOptions(), 0, nullptr);
  EXPECT_EQ(samples.status().message(), "generation needs at least one sample, got 0");
}

TEST(Generate, AnEmptyPromptIsRefused) {
  auto model = Make(model::Cs336Config(64, 8, 32, 1, 4, 64), 1);
  ASSERT_NE(model, nullptr);
  auto ids = Generate(*model, {}, GenerateOptions(), nullptr);
  EXPECT_EQ(ids.status().message(), "generation needs a prompt of at least one token");
}

}  // namespace
}  // namespace lmf::experiments
