// The learning-rate transfer sweep files plan: 3 widths x 5 learning rates each, every width at head size 16
// and d_ff = 2.75 d_model, muP's runs with the MUP init at base width 32 and the contrast's with GPT2's.
#include <cstdlib>
#include <set>
#include <string>

#include "experiments/sweep/plan.h"
#include "experiments/sweep/train_run.h"
#include "gtest/gtest.h"

namespace lmf::sweep {
namespace {

absl::StatusOr<SweepPlan> PlanFile(const std::string& name) {
  const std::string path = std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/sweeps/" + name;
  absl::StatusOr<config::Sweep> sweep = LoadSweep(path);
  if (!sweep.ok()) return sweep.status();
  return PlanSweep(*sweep, path, std::getenv("TEST_TMPDIR"), SizeOfModel);
}

void ExpectWidthsByLrs(const SweepPlan& plan, config::InitConfig::Scheme scheme) {
  ASSERT_EQ(plan.runs.size(), 15u);
  std::set<int> widths;
  std::set<double> lrs;
  for (const PlannedRun& r : plan.runs) {
    const auto& m = r.experiment.model();
    widths.insert(m.d_model());
    lrs.insert(r.experiment.optimizer().lr());
    EXPECT_EQ(m.d_model() / m.n_heads(), 16) << r.name;
    EXPECT_EQ(m.ffn().d_ff() * 8, m.d_model() * 22) << r.name;  // 2.75 d_model
    EXPECT_EQ(m.init().scheme(), scheme) << r.name;
    EXPECT_EQ(r.budget_flops, 0) << r.name;  // outside IsoFLOP budgets: the report's width curves
  }
  EXPECT_EQ(widths, (std::set<int>{32, 64, 128}));
  EXPECT_EQ(lrs.size(), 5u);
  EXPECT_EQ(plan.runs[0].name, "d_model=32,n_heads=2,d_ff=88,lr=1e-3");
}

TEST(TransferSweeps, MupTransferPlansWidthsByLearningRatesUnderMup) {
  absl::StatusOr<SweepPlan> plan = PlanFile("mup_transfer.textproto");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectWidthsByLrs(*plan, config::InitConfig::MUP);
  EXPECT_EQ(plan->runs[0].experiment.model().init().mup_base_d_model(), 32);
}

TEST(TransferSweeps, SpTransferPlansTheSameGridUnderStandardParametrization) {
  absl::StatusOr<SweepPlan> plan = PlanFile("sp_transfer.textproto");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ExpectWidthsByLrs(*plan, config::InitConfig::GPT2);
}

}  // namespace
}  // namespace lmf::sweep
