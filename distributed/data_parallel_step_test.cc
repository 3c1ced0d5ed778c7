// DataParallelStep's overlapped gradient sums (buckets started during the last backward) against one
// all-reduce after it: on 2 processes the sums are a + b either way, so 5 steps give the same weights bit
// for bit; on 3 the ring adds each element in an order that depends on the buffer it is in, so they agree
// to fp32 rounding, amplified by AdamW (bound 1e-5 of the largest weight). Every part of the model is
// summed (a parameter left out would differ by a factor of the ranks).
#include "distributed/data_parallel_step.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/step_testing.h"
#include "distributed/test_ranks.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"
#include "model/optimizer/adamw.h"

namespace lmf::distributed {
namespace {

using testing::Checks;
using testing::ExpectAllPassed;
using testing::RandomBatches;
using testing::RunRanks;
using testing::Weights;

constexpr int64_t kB = 2, kT = 8;

int CheckOverlap(Collectives& group, const model::ModelConfig& c) {
  Checks checks(group.rank());
  std::vector<std::unique_ptr<model::LanguageModel>> models;
  for (int i = 0; i < 2; ++i) {
    models.push_back(*model::LanguageModel::Create(c, kernels::Context::Cpu()));
    models.back()->InitializeParameters(4);
  }
  model::AdamW one(model::AdamWConfig{}, *models[0]), overlapped(model::AdamWConfig{}, *models[1]);
  DataParallelStep after(group, /*overlap=*/false), during(group, /*overlap=*/true);
  RandomBatches data_a(c.vocab_size, kB * kT, 9), data_b(c.vocab_size, kB * kT, 9);
  model::StepInput input;
  input.micro_batches = 2 * group.world_size();
  input.b = kB;
  input.t = kT;
  input.lr = 3e-3;
  for (int step = 1; step <= 5; ++step) {
    absl::StatusOr<model::StepResult> a = after.Step(*models[0], one, data_a, input);
    absl::StatusOr<model::StepResult> b = during.Step(*models[1], overlapped, data_b, input);
    if (!checks.Ok(a.status(), "one all-reduce") || !checks.Ok(b.status(), "overlapped")) return checks.exit_code();
    const std::vector<float> wa = Weights(*models[0]), wb = Weights(*models[1]);
    float worst = 0, largest = 0;
    for (size_t i = 0; i < wa.size(); ++i) {
      worst = std::max(worst, std::fabs(wa[i] - wb[i]));
      largest = std::max(largest, std::fabs(wa[i]));
    }
    const bool exact = group.world_size() == 2;
    checks.Expect(exact ? worst == 0 : worst <= 1e-5f * largest,
                  absl::StrCat("step ", step, ": largest weight difference ", worst, " of ", largest));
    checks.Expect(exact ? a->grad_norm == b->grad_norm : std::fabs(a->grad_norm - b->grad_norm) <= 1e-5 * a->grad_norm,
                  absl::StrCat("step ", step, " gradient norm ", a->grad_norm, " vs ", b->grad_norm));
  }
  return checks.exit_code();
}

model::ModelConfig Untied() { return model::Cs336Config(61, 16, 32, 3, 4, 64); }
model::ModelConfig Tied() { return model::Gpt2Config(59, 16, 32, 2, 4); }

TEST(DataParallelStep, OverlapOnTwoRanksIsBitForBit) {
  ExpectAllPassed(RunRanks(2, [](Collectives& g) { return CheckOverlap(g, Untied()); }));
  ExpectAllPassed(RunRanks(2, [](Collectives& g) { return CheckOverlap(g, Tied()); }));
}

TEST(DataParallelStep, OverlapOnThreeRanksAgreesToRounding) {
  ExpectAllPassed(RunRanks(3, [](Collectives& g) { return CheckOverlap(g, Untied()); }));
}

}  // namespace
}  // namespace lmf::distributed
