// Generate over the model's incremental forward against recomputing the full forward for every new token:
// greedy generation gives the same ids within the context, and past it, where the cache restarts from the
// newest half of the window, the same ids as the full forward over that same window. (That the incremental
// logits equal LanguageModel::Forward at every position, for every architecture variant, is
// model/language_model/language_model_decode_test.)
#include <algorithm>
#include <cstdint>
#include <memory>
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

TEST(Generate, AnEmptyPromptIsRefused) {
  auto model = Make(model::Cs336Config(64, 8, 32, 1, 4, 64), 1);
  ASSERT_NE(model, nullptr);
  auto ids = Generate(*model, {}, GenerateOptions(), nullptr);
  EXPECT_EQ(ids.status().message(), "generation needs a prompt of at least one token");
}

}  // namespace
}  // namespace lmf::experiments
