// Test and benchmark helpers for the step strategies (data_parallel_step.h, zero.h): a stream of random
// micro-batches every rank draws alike, and a model's weights as one host vector to compare.
#ifndef LMFORGE_DISTRIBUTED_STEP_TESTING_H_
#define LMFORGE_DISTRIBUTED_STEP_TESTING_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model/language_model/language_model.h"
#include "model/training/step_strategy.h"

namespace lmf::distributed::testing {

// Micro-batches of `tokens` uniform ids in [0, vocab) and as many targets, from `seed`: the same stream on
// every rank, each computing its share and skipping the others.
class RandomBatches final : public model::MicroBatchSource {
 public:
  RandomBatches(int64_t vocab, int64_t tokens, uint64_t seed) : vocab_(vocab), tokens_(tokens), engine_(seed) {}
  absl::Status Next(int32_t* ids, int32_t* targets) override {
    for (int64_t i = 0; i < tokens_; ++i) ids[i] = Draw(), targets[i] = Draw();
    return absl::OkStatus();
  }
  void Skip() override {
    for (int64_t i = 0; i < 2 * tokens_; ++i) Draw();
  }

 private:
  int32_t Draw() { return static_cast<int32_t>(engine_() % static_cast<uint64_t>(vocab_)); }
  int64_t vocab_, tokens_;
  std::mt19937_64 engine_;
};

// Every parameter's values, in VisitParameters order (host fp32 models).
inline std::vector<float> Weights(const model::LanguageModel& m) {
  std::vector<float> all;
  m.VisitParameters([&](const std::string&, const model::Parameter& p) {
    all.insert(all.end(), p.value.data<float>(), p.value.data<float>() + p.value.numel());
  });
  return all;
}

}  // namespace lmf::distributed::testing

#endif  // LMFORGE_DISTRIBUTED_STEP_TESTING_H_
