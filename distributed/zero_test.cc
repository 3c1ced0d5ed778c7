// ZeRO-1 on 2 and 4 Gloo processes: 10 steps of data parallelism with the optimizer state sharded give the
// weights of unsharded data parallelism bit for bit after every step (the same summed gradients, norm and
// update, computed by the owner and broadcast); each rank holds at most 1/data of the moments plus the
// largest parameter's (measured from the optimizer); the consolidated state on rank 0 equals the unsharded
// optimizer's, and dropping it returns rank 0 to its shard.
#include "distributed/zero.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "distributed/data_parallel_step.h"
#include "distributed/step_testing.h"
#include "distributed/test_ranks.h"
#include "gtest/gtest.h"
#include "kernels/core/context.h"

namespace lmf::distributed {
namespace {

using testing::Checks;
using testing::ExpectAllPassed;
using testing::RandomBatches;
using testing::RunRanks;
using testing::Weights;

constexpr int64_t kB = 2, kT = 8;

std::unique_ptr<model::LanguageModel> Make(const model::ModelConfig& c) {
  absl::StatusOr<std::unique_ptr<model::LanguageModel>> m = model::LanguageModel::Create(c, kernels::Context::Cpu());
  if (!m.ok()) return nullptr;
  (*m)->InitializeParameters(/*seed=*/2);
  return *std::move(m);
}

int CheckZeroOne(Collectives& group) {
  Checks checks(group.rank());
  const model::ModelConfig c = model::Cs336Config(/*vocab_size=*/61, 16, /*d_model=*/32, /*n_layers=*/2, 4, 64);
  std::unique_ptr<model::LanguageModel> plain = Make(c), sharded = Make(c);
  model::AdamWConfig config;
  config.max_grad_norm = 0.5;  // clipping on: the norm must be the whole model's
  model::AdamW full(config, *plain);
  const std::map<std::string, int> owners = ShardOptimizerState(*sharded, group.world_size());
  model::AdamW shard(config, *sharded, OwnedBy(owners, group.rank()));
  DataParallelStep plain_step(group), sharded_step(group);
  sharded_step.ShardOptimizerState(owners);
  RandomBatches plain_data(c.vocab_size, kB * kT, 7), sharded_data(c.vocab_size, kB * kT, 7);
  model::StepInput input;
  input.micro_batches = 2 * group.world_size();
  input.b = kB;
  input.t = kT;
  input.lr = 3e-3;
  for (int step = 1; step <= 10; ++step) {
    absl::StatusOr<model::StepResult> a = plain_step.Step(*plain, full, plain_data, input);
    absl::StatusOr<model::StepResult> b = sharded_step.Step(*sharded, shard, sharded_data, input);
    if (!checks.Ok(a.status(), "plain step") || !checks.Ok(b.status(), "sharded step")) return checks.exit_code();
    checks.Expect(a->loss == b->loss && a->grad_norm == b->grad_norm, absl::StrCat("step ", step, " loss, norm"));
    checks.Expect(Weights(*plain) == Weights(*sharded), absl::StrCat("step ", step, ": weights bit for bit"));
  }
  int64_t largest = 0;
  plain->VisitParameters([&](const std::string&, const model::Parameter& p) {
    largest = std::max<int64_t>(largest, 2 * static_cast<int64_t>(p.value.nbytes()));
  });
  checks.Expect(shard.state_bytes() <= full.state_bytes() / group.world_size() + largest,
                absl::StrCat("rank ", group.rank(), " holds ", shard.state_bytes(), " bytes of moments; unsharded ",
                             full.state_bytes(), " over ", group.world_size(), " ranks"));
  checks.Expect(shard.state_bytes() < full.state_bytes() || group.world_size() == 1, "sharded holds less");
  const int64_t own = shard.state_bytes();
  if (!checks.Ok(ConsolidateOptimizerState(group, owners, *sharded, shard), "consolidate")) return checks.exit_code();
  if (group.rank() == 0) {
    checks.Expect(shard.state_bytes() == full.state_bytes(), "rank 0 holds every moment after consolidating");
    plain->VisitParameters([&](const std::string& name, const model::Parameter&) {
      std::vector<float> m1, v1, m2, v2;
      checks.Expect(full.ReadState(name, &m1, &v1) && shard.ReadState(name, &m2, &v2) && m1 == m2 && v1 == v2,
                    name + ": consolidated moments equal the unsharded optimizer's");
    });
    shard.DropAdopted();
  }
  checks.Expect(shard.state_bytes() == own, "back to its shard");
  return checks.exit_code();
}

TEST(ZeroOne, TwoRanksEqualUnshardedDataParallel) { ExpectAllPassed(RunRanks(2, CheckZeroOne)); }
TEST(ZeroOne, FourRanksEqualUnshardedDataParallel) { ExpectAllPassed(RunRanks(4, CheckZeroOne)); }

TEST(ZeroOne, TheShardIsBalancedAndTheSameOnEveryRank) {
  const model::ModelConfig c = model::Cs336Config(61, 16, 32, 4, 4, 64);
  std::unique_ptr<model::LanguageModel> m = Make(c);
  const std::map<std::string, int> a = ShardOptimizerState(*m, 3), b = ShardOptimizerState(*m, 3);
  EXPECT_EQ(a, b);
  std::vector<int64_t> load(3, 0);
  int64_t largest = 0, total = 0;
  m->VisitParameters([&](const std::string& name, const model::Parameter& p) {
    load[a.at(name)] += p.value.numel();
    largest = std::max(largest, p.value.numel());
    total += p.value.numel();
  });
  for (int64_t l : load) EXPECT_LE(l, total / 3 + largest);
}

}  // namespace
}  // namespace lmf::distributed
