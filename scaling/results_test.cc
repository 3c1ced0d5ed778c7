// Tests for the results table: a round trip through CSV, clear errors for bad cells, observations from
// finished runs only, and training-curve files resolved beside the table.
#include "scaling/results.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/match.h"
#include "base/damaged_copies.h"
#include "base/file.h"
#include "gtest/gtest.h"

namespace lmf::scaling {
namespace {

constexpr char kHeader[] =
    "run,budget_flops,params,non_embedding_params,tokens,flops,final_loss,best_val_loss,d_model,n_layers,n_heads,"
    "batch_size,lr,status\n";

ResultsTable Example() {
  ResultsTable t;
  RunResult a;
  a.run = "c1e17_d256";
  a.budget_flops = 1e17;
  a.params = 3.1e6;
  a.non_embedding_params = 2.2e6;
  a.tokens = 7.5e9;
  a.flops = 1.0000001e17;
  a.final_loss = 3.25;
  a.best_val_loss = 3.2;
  a.d_model = 256;
  a.n_layers = 4;
  a.n_heads = 4;
  a.batch_size = 32;
  a.lr = 3e-3;
  a.curve_file = "curves/c1e17_d256.csv";
  RunResult b = a;
  b.run = "c1e17_d512, wide";  // a comma in a name must be quoted
  b.status = RunStatus::kFailed;
  b.final_loss = b.best_val_loss = NAN;
  b.curve_file = "";
  t.runs = {a, b};
  return t;
}

TEST(ResultsTest, RoundTripsThroughCsv) {
  const std::string text = FormatResults(Example());
  absl::StatusOr<ResultsTable> back = ParseResults(text, "r.csv");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->runs.size(), 2u);
  const RunResult& a = back->runs[0];
  EXPECT_EQ(a.run, "c1e17_d256");
  EXPECT_EQ(a.flops, 1.0000001e17);  // written with 17 digits: exact
  EXPECT_EQ(a.lr, 3e-3);
  EXPECT_EQ(a.n_heads, 4);
  EXPECT_EQ(a.curve_file, "curves/c1e17_d256.csv");
  EXPECT_EQ(back->runs[1].run, "c1e17_d512, wide");
  EXPECT_EQ(back->runs[1].status, RunStatus::kFailed);
  EXPECT_TRUE(std::isnan(back->runs[1].final_loss));
  EXPECT_EQ(FormatResults(*back), text);
}

// Rows that contradict themselves are refused at the cell (they were accepted and fitted): more
// non-embedding parameters than parameters, a best loss above the final one beyond the rounding of the
// printed digits, fewer FLOP than tokens.
TEST(ResultsTest, InconsistentRowsAreRefused) {
  auto parse = [](const std::string& row) {
    return ParseResults(std::string(kHeader) + row + "\n", "r.csv");
  };
  absl::StatusOr<ResultsTable> t = parse("a,1e17,3e6,1e9,7e9,1e17,3.2,3.1,256,4,4,32,0.003,finished");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(
      t.status().message(),
      "r.csv:2:4 (non_embedding_params): non_embedding_params 1e9 is more than params 3e6 (params counts "
      "every parameter, embeddings included)");
  t = parse("a,1e17,3e6,2e6,7e9,1e17,3.2,9,256,4,4,32,0.003,finished");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(
      t.status().message(),
      "r.csv:2:8 (best_val_loss): best_val_loss 9 is more than final_loss 3.2 (the best is the lowest of "
      "the evaluations, the final one included)");
  t = parse("a,1e17,3e6,2e6,7e9,1,3.2,3.1,256,4,4,32,0.003,finished");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("r.csv:2:6 (flops): flops 1 is less than tokens 7e9"),
            std::string::npos)
      << t.status();
  // Within the rounding of the printed digits: 3.2 (3.15..3.25) may stand for a best of 3.2456 when the
  // final loss 3.2449 was printed with more digits; and equal losses, 6ND far from flops, a budget far from
  // flops, and a failed run with no tokens are all fine.
  for (const char* ok : {"a,1e17,3e6,2e6,7e9,1e17,3.2449,3.2,256,4,4,32,0.003,finished",
                         "a,1e17,3e6,2e6,7e9,1e17,3.2,3.2456,256,4,4,32,0.003,finished",
                         "a,1e17,3e6,3e6,7e9,1e17,2.5e0,2.5,256,4,4,32,0.003,finished",
                         "a,1e15,3e6,2e6,7e9,5e18,3.3,3.2,256,4,4,32,0.003,finished",
                         "a,1e17,3e6,2e6,0,0,,,256,4,4,32,0.003,failed"}) {
    EXPECT_TRUE(parse(ok).ok()) << ok << ": " << parse(ok).status();
  }
  EXPECT_FALSE(parse("a,1e17,3e6,2e6,7e9,1e17,3.2449,3.26,256,4,4,32,0.003,finished").ok());
}

TEST(ResultsTest, ErrorsNameFileLineAndColumn) {
  std::string text = std::string(kHeader) + "a,1e17,3e6,2e6,7e9,1e17,3.2,3.1,256,4,4,32,0.003,finished\n" +
                     "b,1e17,3e6,2e6,7e9,1e17,,3.1,256,4,4,32,0.003,finished\n";
  absl::StatusOr<ResultsTable> t = ParseResults(text, "sweep/results.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "sweep/results.csv:3:7 (final_loss): expected a number, got an empty cell");

  text = std::string(kHeader) + "a,1e17,3e6,2e6,7e9,1e17,3.2,3.1,256.5,4,4,32,0.003,finished\n";
  t = ParseResults(text, "r.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "r.csv:2:9 (d_model): expected a whole number, got '256.5'");

  text = std::string(kHeader) + "a,1e17,3e6,2e6,7e9,1e17,3.2,3.1,256,4,4,32,0.003,done\n";
  t = ParseResults(text, "r.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "r.csv:2:14 (status): expected finished, failed or diverged, got 'done'");

  text = std::string(kHeader) + "a,1e17,-3e6,2e6,7e9,1e17,3.2,3.1,256,4,4,32,0.003,finished\n";
  EXPECT_FALSE(ParseResults(text, "r.csv").ok());
  // A run that failed before its first step spent nothing and has no loss: accepted.
  text = std::string(kHeader) + "a,1e17,3e6,2e6,0,0,,,256,4,4,32,0.003,failed\n";
  EXPECT_TRUE(ParseResults(text, "r.csv").ok());
  text = std::string(kHeader) + "a,1e17,3e6,2e6,0,0,,,256,4,4,32,0.003,finished\n";
  EXPECT_FALSE(ParseResults(text, "r.csv").ok());
  text = std::string(kHeader) + "a,1e17,3e6,2e6,7e9,1e17,3.2,3.1,256,4,4,32,0.003,finished\n" +
         "a,1e17,3e6,2e6,7e9,1e17,3.2,3.1,256,4,4,32,0.003,finished\n";
  t = ParseResults(text, "r.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "r.csv:3:1 (run): run 'a' appears twice");
  // Only N, D or C, and the loss are required (a published sweep has no more).
  t = ParseResults("run,params\nx,1\n", "r.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "r.csv: missing column 'tokens' or 'flops' (a results table needs N, D or C, and the loss)");
  t = ParseResults("run,tokens,final_loss\nx,1e9,3\n", "r.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "r.csv: missing column 'params' or 'non_embedding_params' (a results table needs N, D or C, and the loss)");
  t = ParseResults("params,tokens\n1e6,1e9\n", "r.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("missing column 'final_loss'"), std::string::npos);
}

TEST(ResultsTest, ExtraColumnsAreIgnoredAndOrderIsFree) {
  const std::string text =
      "status,run,wall_seconds,budget_flops,params,non_embedding_params,tokens,flops,final_loss,best_val_loss,"
      "d_model,n_layers,n_heads,batch_size,lr\nfinished,a,12.5,1e17,3e6,2e6,7e9,1e17,3.2,3.1,256,4,4,32,0.003\n";
  absl::StatusOr<ResultsTable> t = ParseResults(text, "r.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->runs[0].run, "a");
  EXPECT_EQ(t->runs[0].best_val_loss, 3.1);
}

// A published sweep's table: N, C and the loss only. Tokens come from D = C / (6N) (Epoch's convention), the
// run names from the lines, every run counts as finished, and the table records what it lacked; written
// back, it keeps to the columns it has (and tokens).
TEST(ResultsTest, APublishedTableOfNCAndLossIsRead) {
  absl::StatusOr<ResultsTable> t = ParseResults("params,flops,final_loss\n4e8,2.4e19,2.9\n1e9,6e19,2.7\n", "pub.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->runs.size(), 2u);
  EXPECT_EQ(t->runs[0].run, "line2");
  EXPECT_EQ(t->runs[1].run, "line3");
  EXPECT_EQ(t->runs[0].status, RunStatus::kFinished);
  EXPECT_DOUBLE_EQ(t->runs[0].tokens, 2.4e19 / (6 * 4e8));
  EXPECT_EQ(t->runs[0].d_model, 0);
  EXPECT_EQ(t->runs[0].budget_flops, 0);
  EXPECT_TRUE(std::isnan(t->runs[0].best_val_loss));
  EXPECT_TRUE(t->Has("params"));
  EXPECT_FALSE(t->Has("tokens"));
  EXPECT_FALSE(t->Has("d_model"));
  EXPECT_FALSE(t->Has("non_embedding_params"));
  // N for the fits must be a column the table has, and so must the loss.
  absl::StatusOr<Observations> obs = ToObservations(*t, {/*non_embedding=*/true, /*best_loss=*/false,
                                                                  /*active=*/false});
  ASSERT_FALSE(obs.ok());
  EXPECT_EQ(obs.status().message(), "pub.csv: no non_embedding_params column to take N from; use the params column "
                                    "(--params=total)");
  obs = ToObservations(*t, {false, true, false});
  ASSERT_FALSE(obs.ok());
  EXPECT_EQ(obs.status().message(), "pub.csv: no best_val_loss column; use the final loss (--loss=final)");
  obs = ToObservations(*t, {false, false, false});
  ASSERT_TRUE(obs.ok());
  EXPECT_EQ((*obs)[1].params, 1e9);
  EXPECT_DOUBLE_EQ((*obs)[1].tokens, 1e10);
  EXPECT_EQ((*obs)[1].loss, 2.7);
  const std::string written = FormatResults(*t);
  EXPECT_EQ(written.substr(0, written.find('\n')), "params,tokens,flops,final_loss");
  absl::StatusOr<ResultsTable> back = ParseResults(written, "back.csv");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_DOUBLE_EQ(back->runs[1].tokens, 1e10);
  EXPECT_FALSE(back->Has("d_model"));
  // Tokens and non-embedding N only: C = 6 N D. A column that is there is still checked in every row.
  t = ParseResults("non_embedding_params,tokens,final_loss\n4e8,1e10,2.9\n", "pub.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->runs[0].flops, 6 * 4e8 * 1e10);
  t = ParseResults("params,flops,final_loss,lr\n4e8,2.4e19,2.9,0\n", "pub.csv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "pub.csv:2:4 (lr): expected a positive learning rate, got '0'");
}

TEST(ResultsTest, ObservationsComeFromFinishedRunsOnly) {
  const ResultsTable t = Example();
  Observations obs = ToObservations(t, {/*non_embedding=*/true, /*best_loss=*/false, /*active=*/false}).value();
  ASSERT_EQ(obs.size(), 1u);
  EXPECT_EQ(obs[0].params, 2.2e6);
  EXPECT_EQ(obs[0].loss, 3.25);
  EXPECT_EQ(obs[0].budget, 1e17);
  obs = ToObservations(t, {false, true, false}).value();
  EXPECT_EQ(obs[0].params, 3.1e6);
  EXPECT_EQ(obs[0].loss, 3.2);
}

// Mixture-of-experts runs carry their active counts: written (and read back) only when some run's differ from
// its totals, so a dense table's CSV is what it was before the columns existed; the active choice takes N
// from them, and from the totals for a dense run; an active count above its total, or a table of MoE runs
// without the active column the choice reads, is refused naming the cell or the column.
TEST(ResultsTest, ActiveCountsOfMixtureOfExpertsRuns) {
  const ResultsTable dense = Example();
  EXPECT_FALSE(dense.HasMixtureOfExperts());
  EXPECT_EQ(FormatResults(dense).find("active"), std::string::npos);
  ResultsTable moe = Example();
  moe.runs[0].active_params = 1.1e6, moe.runs[0].active_non_embedding_params = 0.2e6;
  ASSERT_TRUE(moe.HasMixtureOfExperts());
  const std::string text = FormatResults(moe);
  EXPECT_TRUE(absl::StartsWith(text, std::string(kHeader).substr(0, std::string(kHeader).size() - 1) +
                                         ",curve_file,active_params,active_non_embedding_params\n"))
      << text;
  absl::StatusOr<ResultsTable> back = ParseResults(text, "moe.csv");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->runs[0].active_params, 1.1e6);
  EXPECT_EQ(back->runs[0].active_non_embedding_params, 0.2e6);
  EXPECT_TRUE(std::isnan(back->runs[1].active_params)) << "an empty cell: a dense run";
  EXPECT_EQ(FormatResults(*back), text);
  for (const bool non_embedding : {true, false}) {
    const ObservationChoice total{non_embedding, false, /*active=*/false}, active{non_embedding, false, true};
    EXPECT_EQ(ToObservations(*back, total).value()[0].params, non_embedding ? 2.2e6 : 3.1e6);
    EXPECT_EQ(ToObservations(*back, active).value()[0].params, non_embedding ? 0.2e6 : 1.1e6);
    EXPECT_EQ(ToObservations(dense, active).value()[0].params, ToObservations(dense, total).value()[0].params);
  }
  absl::StatusOr<ResultsTable> bad =
      ParseResults(std::string("params,non_embedding_params,flops,final_loss,active_params\n3e6,2e6,1e17,3.2,4e6\n"),
                   "bad.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "bad.csv:2:5 (active_params): active_params 4e6 is more than params 3e6 (a token uses some of the "
            "parameters, never more)");
  absl::StatusOr<ResultsTable> partial =
      ParseResults(std::string("params,non_embedding_params,flops,final_loss,active_params\n3e6,2e6,1e17,3.2,1e6\n"),
                   "partial.csv");
  ASSERT_TRUE(partial.ok()) << partial.status();
  absl::StatusOr<Observations> missing = ToObservations(*partial, {true, false, true});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "partial.csv: no active_non_embedding_params column to take the mixture-of-experts runs' active N "
            "from; use their total N (--moe_params=total)");
}

TEST(ResultsTest, WritesAtomicallyAndReadsCurvesBesideTheTable) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/results_test";
  ASSERT_TRUE(MakeDirs(dir + "/curves").ok());
  ResultsTable t = Example();
  ASSERT_TRUE(WriteResults(dir + "/results.csv", t).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/curves/c1e17_d256.csv",
                                  "step,tokens,flops,loss\n0,0,0,10.8\n100,1e8,1.3e15,5.0\n200,2e8,2.6e15,4.2\n")
                  .ok());
  absl::StatusOr<ResultsTable> back = ReadResults(dir + "/results.csv");
  ASSERT_TRUE(back.ok()) << back.status();
  absl::StatusOr<std::vector<TrainingCurve>> curves = ReadTrainingCurves(*back, {true, false, false});
  ASSERT_TRUE(curves.ok()) << curves.status();
  ASSERT_EQ(curves->size(), 1u);  // the failed run has no curve
  EXPECT_EQ((*curves)[0].run, "c1e17_d256");
  EXPECT_EQ((*curves)[0].params, 2.2e6);
  ASSERT_EQ((*curves)[0].points.size(), 2u);  // step 0 spent no compute and is left out
  EXPECT_EQ((*curves)[0].points[1].loss, 4.2);

  ASSERT_TRUE(WriteFileAtomically(dir + "/curves/c1e17_d256.csv", "step,tokens,flops,loss\n100,1e8,1e15,5\n50,1,1,1\n").ok());
  curves = ReadTrainingCurves(*back, {true, false, false});
  ASSERT_FALSE(curves.ok());
  EXPECT_NE(curves.status().message().find("curve of run 'c1e17_d256'"), std::string::npos);
  EXPECT_NE(curves.status().message().find("c1e17_d256.csv:3:1 (step): steps must increase"), std::string::npos);
}

// Every truncation and 3000 seeded edits of a results table: an error that names the file, or a table.
// Never a crash (or, under --config=asan, a bad read).
TEST(ResultsTest, DamagedTablesGiveErrorsNamingTheFileOrTables) {
  int errors = 0;
  for (const std::string& bad : DamagedCopies(FormatResults(Example()), /*seed=*/29, /*edits=*/3000)) {
    absl::StatusOr<ResultsTable> r = ParseResults(bad, "r.csv");
    if (r.ok()) continue;
    ++errors;
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "r.csv")) << r.status() << "\n" << Escaped(bad);
  }
  EXPECT_GT(errors, 1000);
}

// The same for a training curve file: an error that names the file, or points whose tokens and FLOPs grow.
TEST(ResultsTest, DamagedCurvesGiveErrorsNamingTheFileOrCurves) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/damaged_curve.csv";
  const std::string valid = "step,tokens,flops,loss\n0,0,0,10.8\n100,1e8,1.3e15,5.0\n200,2e8,2.6e15,4.2\n";
  ASSERT_TRUE(
      WriteFileAtomically(path, "step,tokens,flops,loss\n100,1e8,1.3e15,5\n200,2e8,1.3e14,4.2\n").ok());
  EXPECT_EQ(ReadTrainingCurve(path, 2.2e6).status().message(),
            path + ":3:3 (flops): flops must increase with step (1.3e+14 after 1.3e+15)");
  int errors = 0;
  for (const std::string& bad : DamagedCopies(valid, /*seed=*/47, /*edits=*/2000)) {
    ASSERT_TRUE(WriteFileAtomically(path, bad).ok());
    absl::StatusOr<TrainingCurve> curve = ReadTrainingCurve(path, 2.2e6);
    if (!curve.ok()) {
      ++errors;
      EXPECT_TRUE(absl::StrContains(curve.status().message(), path)) << curve.status() << "\n"
                                                                     << Escaped(bad);
      continue;
    }
    for (size_t i = 0; i < curve->points.size(); ++i) {
      const CurvePoint& p = curve->points[i];
      EXPECT_TRUE(p.tokens > 0 && p.flops > 0 && std::isfinite(p.loss)) << Escaped(bad);
      if (i > 0) {
        EXPECT_GT(p.tokens, curve->points[i - 1].tokens) << Escaped(bad);
        EXPECT_GT(p.flops, curve->points[i - 1].flops) << Escaped(bad);
      }
    }
  }
  EXPECT_GT(errors, 500);
}

}  // namespace
}  // namespace lmf::scaling
