// The quickstart's recipe design (--recipe): the checked-in experiments/sweeps/recipe_quickstart.textproto is
// what it plans, and a small sweep of it (2 budgets x 3 sizes, each budget's grid model a 5 x 5 batch x lr
// grid whose lr axis moves with the budget: 54 runs of tiny models on a 1 MB synthetic corpus, a few minutes
// of CPU) runs through the CLI to a report with both batch/lr laws and their intervals, the gradient noise
// scale beside B_opt, and a recipe that says what it extrapolated.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "base/file.h"
#include "experiments/quickstart/quickstart.h"
#include "experiments/sweep/plan.h"
#include "experiments/sweep/train_run.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace lmf::quickstart {
namespace {

std::string Runfile(const std::string& path) { return std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/" + path; }

TEST(RecipeQuickstart, TheCheckedInSweepFileIsWhatTheQuickstartPlans) {
  QuickstartOptions o;
  o.out_dir = "lmforge_quickstart_recipe";
  o.recipe = true;
  const config::Sweep planned =
      QuickstartSweep(o, "lmforge_quickstart_recipe/data/train.tok", "lmforge_quickstart_recipe/data/val.tok",
                      "lmforge_quickstart_recipe/tokenizer.lmftok");
  absl::StatusOr<config::Sweep> file = sweep::LoadSweep(Runfile("experiments/sweeps/recipe_quickstart.textproto"));
  ASSERT_TRUE(file.ok()) << file.status();
  std::string diff;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(planned, *file)) << diff;
  // It plans: every budget has its grid model's 25 runs and 4 others.
  absl::StatusOr<sweep::SweepPlan> plan = sweep::PlanSweep(*file, "recipe_quickstart.textproto",
                                                           std::getenv("TEST_TMPDIR"), sweep::SizeOfModel);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->runs.size(), 4u * (4 + 25));
}

TEST(RecipeQuickstart, RunsThroughTheCliToAReportWithBothLawsAndTheNoiseScale) {
  const std::string out = std::string(std::getenv("TEST_TMPDIR")) + "/recipe";
  const std::string command = Runfile("experiments/quickstart/quickstart") + " --recipe --out=" + out +
                              " --corpus_mb=1 --vocab_size=384 --budgets=4e10,8e10 --models_per_budget=3 "
                              "--target_flops=1e13 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string said;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) said.append(buffer, n);
  ASSERT_EQ(::pclose(pipe), 0) << said;
  EXPECT_NE(said.find("done: 54 runs finished, 0 failed"), std::string::npos) << said;

  absl::StatusOr<std::string> md = ReadFile(out + "/sweep/report/report.md");
  ASSERT_TRUE(md.ok()) << md.status();
  // Both laws, each with its bootstrap interval.
  EXPECT_NE(md->find("## Batch size and learning rate\n\n| budget (FLOP) |"), std::string::npos) << *md;
  EXPECT_NE(md->find("B_opt = k C<sup>a</sup>: k = "), std::string::npos) << *md;
  EXPECT_NE(md->find(", a = "), std::string::npos) << *md;
  const size_t batch_law = md->find("B_opt = k C<sup>a</sup>: k = ");
  const size_t lr_law = md->find("lr_opt = k' C<sup>b</sup>: k' = ");
  ASSERT_NE(batch_law, std::string::npos) << *md;
  ASSERT_NE(lr_law, std::string::npos) << *md;
  EXPECT_NE(md->substr(batch_law, md->find('\n', batch_law) - batch_law).find(" ["), std::string::npos) << *md;
  EXPECT_NE(md->substr(lr_law, md->find('\n', lr_law) - lr_law).find(" ["), std::string::npos) << *md;
  EXPECT_NE(md->find("within 15% of its best loss"), std::string::npos) << *md;  // isoflop.grid_fit_window
  // Both 25-run grids have a minimum and enter the laws, which give a value at the target. The intervals are
  // not asserted firm: with only 2 budgets every resample needs both grids' fits, and about half the
  // resamples lose one (445 of 1000 measured with a fixed lr axis), so the report may mark them unreliable.
  for (const std::string budget : {"4·10<sup>10</sup>", "8·10<sup>10</sup>"}) {
    const size_t row = md->find("| " + budget + " | 25 | ");
    ASSERT_NE(row, std::string::npos) << budget << "\n" << *md;
    const std::string line = md->substr(row, md->find('\n', row) - row);
    EXPECT_EQ(line.substr(line.size() - 7), "| yes |") << line;
    // With the lr axis moved by grid_lr_prior, each fitted optimum lies inside its grid (the 7th column),
    // not extrapolated past an axis's end (measured: batch 3.8 and 4.9 in 2 to 32, lr 0.040 and 0.018 in
    // 0.024 to 0.38 and 0.014 to 0.22).
    const std::vector<std::string> columns = absl::StrSplit(line, " | ");
    ASSERT_GE(columns.size(), 7u) << line;
    EXPECT_EQ(columns[6], "yes") << line;
  }
  EXPECT_NE(md->find("\nAt 10<sup>13</sup> FLOP: B_opt "), std::string::npos) << *md;
  // The gradient noise scale: its section with both budgets, and its figure.
  EXPECT_NE(md->find("## Gradient noise scale\n\n| budget (FLOP) | runs | B_simple at the end (median)"),
            std::string::npos)
      << *md;
  EXPECT_NE(md->find("| 4·10<sup>10</sup> | 27 | "), std::string::npos) << *md;
  EXPECT_NE(md->find("| 8·10<sup>10</sup> | 27 | "), std::string::npos) << *md;
  absl::StatusOr<std::string> svg = ReadFile(out + "/sweep/report/noise_scale.svg");
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_NE(svg->find("B_opt per budget"), std::string::npos);
  // The recipe states what it extrapolated, and its basis says it took the laws.
  EXPECT_NE(md->find("**Extrapolated batch size and learning rate:** B_opt(C) = "), std::string::npos) << *md;
  EXPECT_NE(md->find("fitted to the optima of 2 budgets' batch x lr grids"), std::string::npos) << *md;
  EXPECT_NE(md->find("batch size and lr then replaced by the grids' laws B_opt = "), std::string::npos) << *md;
}

}  // namespace
}  // namespace lmf::quickstart
