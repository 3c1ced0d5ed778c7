// Learning rate across widths in the report: a synthetic grid of 3 widths x 5 learning rates whose best lr
// stays (as muP's should) or falls as 1/width (as standard parametrization's does) gives one curve per
// width, each width's best lr, and the factor it moves by, in the section and width_transfer.svg.
#include "scaling/reporting/width_transfer.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "gtest/gtest.h"
#include "scaling/reporting/report.h"

namespace lmf::scaling {
namespace {

// Loss 2 + 0.05 ln(lr / best(width))^2 + 0.5 (32 / width)^0.5 for lr = 1e-3 x 3^k, k = 0..4.
ResultsTable Grid(const std::function<double(int64_t)>& best_lr) {
  ResultsTable table;
  for (int64_t width : {32, 64, 128}) {
    for (int k = 0; k < 5; ++k) {
      RunResult r;
      r.run = absl::StrCat("d", width, "_lr", k);
      r.d_model = width, r.n_layers = 2, r.n_heads = width / 16, r.batch_size = 16;
      r.lr = 1e-3 * std::pow(3.0, k);
      r.non_embedding_params = r.params = 12.0 * 2 * width * width;
      r.tokens = 3e5;
      r.flops = 6 * r.params * r.tokens;
      const double off = std::log(r.lr / best_lr(width));
      r.final_loss = r.best_val_loss = 2 + 0.05 * off * off + 0.5 * std::sqrt(32.0 / width);
      table.runs.push_back(r);
    }
  }
  return table;
}

std::string Report(const ResultsTable& table, const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  EXPECT_TRUE(MakeDirs(dir).ok());
  EXPECT_TRUE(WriteResults(dir + "/results.csv", table).ok());
  ReportOptions options;
  options.target_flops = 1e15;
  options.bootstrap.resamples = 0;
  absl::StatusOr<ScalingAnalysis> a = MakeReport(dir + "/results.csv", options, dir + "/report");
  EXPECT_TRUE(a.ok()) << a.status();
  return dir + "/report";
}

TEST(WidthTransfer, AStableBestLearningRateIsShownToStay) {
  const ResultsTable table = Grid([](int64_t) { return 9e-3; });
  absl::StatusOr<std::vector<WidthLrCurve>> curves = WidthLrCurves(table, ObservationChoice());
  ASSERT_TRUE(curves.ok()) << curves.status();
  ASSERT_EQ(curves->size(), 3u);
  for (const WidthLrCurve& c : *curves) {
    EXPECT_EQ(c.lr.size(), 5u);
    EXPECT_NEAR(c.best_lr, 9e-3, 1e-12) << c.d_model;
  }
  const std::string dir = Report(table, "stays");
  absl::StatusOr<std::string> md = ReadFile(dir + "/report.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("## Learning rate across widths\n\n| d_model | learning rates | best lr (grid) | loss there |"),
            std::string::npos)
      << *md;
  EXPECT_NE(md->find("| 128 | 5 | 0.009 | "), std::string::npos) << *md;
  EXPECT_NE(md->find("From d_model 32 to 128 (4x wider) the best learning rate moves by a factor 1 (it stays)"),
            std::string::npos)
      << *md;
  absl::StatusOr<std::string> svg = ReadFile(dir + "/width_transfer.svg");
  ASSERT_TRUE(svg.ok()) << svg.status();
  for (const char* label : {"d_model = 32", "d_model = 64", "d_model = 128", "best lr of each width"}) {
    EXPECT_NE(svg->find(label), std::string::npos) << label;
  }
}

TEST(WidthTransfer, ABestLearningRateFallingWithWidthIsShownToMove) {
  // Best at 2.7e-2 for width 32, 9e-3 for 64 (the grid's nearest to 1.35e-2 in log: 9e-3), 3e-3 for 128 (near 6.75e-3).
  const std::string dir = Report(Grid([](int64_t w) { return 2.7e-2 * 32.0 / static_cast<double>(w); }), "moves");
  absl::StatusOr<std::string> md = ReadFile(dir + "/report.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("| 32 | 5 | 0.027 | "), std::string::npos) << *md;
  EXPECT_NE(md->find("the best learning rate moves by a factor "), std::string::npos) << *md;
  EXPECT_EQ(md->find("(it stays)"), std::string::npos) << *md;
}

TEST(WidthTransfer, RunsAtOneWidthOrInsideBudgetsAreNotCurves) {
  ResultsTable table = Grid([](int64_t) { return 9e-3; });
  for (RunResult& r : table.runs) {
    if (r.d_model != 32) r.budget_flops = r.flops;  // IsoFLOP runs: not a transfer sweep's
  }
  absl::StatusOr<std::vector<WidthLrCurve>> curves = WidthLrCurves(table, ObservationChoice());
  ASSERT_FALSE(curves.ok());
  EXPECT_NE(curves.status().message().find("no 2 widths (d_model) each have runs outside IsoFLOP budgets at 3 or "
                                           "more learning rates (1 has)"),
            std::string::npos)
      << curves.status();
}

}  // namespace
}  // namespace lmf::scaling
