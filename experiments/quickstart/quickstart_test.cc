// The quickstart end to end at a tiny size (3 budgets x 3 models on a 1 MB synthetic corpus, about a minute): every stage
// leaves its output, the report says the data is synthetic, and a second start redoes nothing.
#include "experiments/quickstart/quickstart.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/file.h"
#include "experiments/sweep/plan.h"
#include "experiments/sweep/train_run.h"
#include "gtest/gtest.h"
#include "scaling/results.h"
#include "tokenizer/token_file.h"

namespace lmf::quickstart {
namespace {

QuickstartOptions TinyOptions(const std::string& out) {
  QuickstartOptions o;
  o.out_dir = out;
  o.corpus_bytes = 1 << 20;
  o.vocab_size = 384;
  o.budgets = {2e10, 4e10, 8e10};
  o.models_per_budget = 3;
  o.parallel_runs = 2;
  o.target_flops = 1e13;
  o.train_command = {std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/quickstart/quickstart",
                     "--train_one"};
  return o;
}

TEST(Quickstart, TextToReportAndASecondStartRedoesNothing) {
  const std::string out = std::string(std::getenv("TEST_TMPDIR")) + "/qs";
  auto result = RunQuickstart(TinyOptions(out));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->finished_runs, 9);
  EXPECT_EQ(result->failed_runs, 0);

  auto tokens = tokenizer::TokenFileReader::Open(out + "/data/train.tok");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->header().vocab_size, 384u);
  auto table = scaling::ReadResults(result->results_csv);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->runs.size(), 9u);
  for (const auto& run : table->runs) {
    EXPECT_EQ(run.status, scaling::RunStatus::kFinished) << run.run;
    EXPECT_LT(run.final_loss, 6.0) << run.run;  // ln(384) = 5.95 is a uniform guess; every run learned
  }
  auto report = ReadFile(result->report);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_NE(report->find("SYNTHETIC"), std::string::npos);
  EXPECT_NE(report->find("Approach 2"), std::string::npos);
  EXPECT_TRUE(FileExists(out + "/sweep.textproto"));

  std::string lines;
  QuickstartOptions again = TinyOptions(out);
  again.progress = [&](const std::string& line) { lines += line + "\n"; };
  auto second = RunQuickstart(again);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->finished_runs, 9);
  EXPECT_EQ(lines.find("[start]"), std::string::npos) << lines;  // every run was skipped
  EXPECT_NE(lines.find("[skip]"), std::string::npos) << lines;

  // The sweep binary's --dry_run on the finished sweep says that its runs are done: the time it prints is
  // the whole design's, not what a start would train.
  const std::string sweep_bin = std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/sweep/sweep";
  FILE* pipe = ::popen((sweep_bin + " --dry_run --sweep=" + out + "/sweep.textproto 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string dry;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) dry.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << dry;
  EXPECT_NE(dry.find("already finished: 9 of 9 runs"), std::string::npos) << dry;
}

// --schedule=wsd: the default design's model sizes recur across its budgets, and each trains its stable
// phase once (the sweep's own tests train such branches and compare them with runs trained alone).
TEST(Quickstart, WsdScheduleSharesStablePhases) {
  QuickstartOptions o;
  o.out_dir = std::string(std::getenv("TEST_TMPDIR")) + "/qs_wsd";
  for (const bool wsd : {false, true}) {
    o.wsd = wsd;
    auto plan = sweep::PlanSweep(QuickstartSweep(o, "/d/train.tok", "/d/val.tok", "/d/tok.lmftok"),
                                 "qs.sweep", o.out_dir, sweep::SizeOfModel);
    ASSERT_TRUE(plan.ok()) << plan.status();
    double flops = 0, own = 0;
    int branches = 0;
    for (const sweep::PlannedRun& r : plan->runs) {
      EXPECT_EQ(r.experiment.schedule().kind(),
                wsd ? config::ScheduleConfig::WSD : config::ScheduleConfig::COSINE);
      flops += r.flops;
      own += r.OwnFlops();
      branches += !r.trunk.empty();
    }
    if (!wsd) {
      EXPECT_EQ(branches, 0);
      continue;
    }
    EXPECT_GE(branches, 10) << sweep::FormatPlan(*plan);
    EXPECT_LT(own, 0.85 * flops) << sweep::FormatPlan(*plan);
  }
}

// An edit of a --data file that keeps its size is seen (the stamp has the text's CRC-32C), and what was made
// from the old corpus is not reused: the sweep moves aside (its runs trained
// on the old text) and the tokenizer and token files are deleted, to be made again.
TEST(Quickstart, AnEditedCorpusRedoesEverythingAfterIt) {
  const std::string out = std::string(std::getenv("TEST_TMPDIR")) + "/qs_edit";
  const std::string text = out + "/text.txt";
  ASSERT_TRUE(MakeDirs(out).ok());
  std::string story;
  for (int i = 0; i < 200; ++i) story += "Once upon a time there was a cat. ";
  ASSERT_TRUE(WriteFileAtomically(text, story).ok());
  QuickstartOptions o = TinyOptions(out);
  o.data = {text};
  std::string said;
  auto say = [&](const std::string& line) { said += line + "\n"; };
  auto first = PrepareCorpus(o, say);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(*first);
  auto again = PrepareCorpus(o, say);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);  // unchanged: nothing redone
  // What the later stages made from it.
  ASSERT_TRUE(MakeDirs(out + "/sweep/runs/r1").ok());
  ASSERT_TRUE(WriteFileAtomically(out + "/sweep/results.csv", "old").ok());
  for (const char* made : {"/tokenizer.lmftok", "/data/train.tok", "/data/val.tok"}) {
    ASSERT_TRUE(WriteFileAtomically(out + made, "old").ok());
  }

  // The same text touched, and its train.txt deleted: still the same corpus (the text is written again, the
  // same bytes; nothing made from it is redone). A folder stamped by the quickstart before it hashed the
  // text (paths and sizes) is taken as the same corpus too.
  struct timespec times[2] = {{0, UTIME_OMIT}, {1700000000, 123456789}};
  ASSERT_EQ(::utimensat(AT_FDCWD, text.c_str(), times, 0), 0);
  auto first_train = ReadFile(out + "/data/train.txt");
  ASSERT_TRUE(first_train.ok());
  ASSERT_EQ(::unlink((out + "/data/train.txt").c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(out + "/data/corpus.stamp", "text files: " + text + "\n" + text + " " +
                                                                  std::to_string(story.size()) + " bytes\n")
                  .ok());
  auto touched = PrepareCorpus(o, say);
  ASSERT_TRUE(touched.ok()) << touched.status();
  EXPECT_FALSE(*touched);
  EXPECT_EQ(*ReadFile(out + "/data/train.txt"), *first_train);
  EXPECT_TRUE(FileExists(out + "/sweep/results.csv"));
  EXPECT_TRUE(FileExists(out + "/tokenizer.lmftok"));
  EXPECT_NE(ReadFile(out + "/data/corpus.stamp")->find("CRC-32C"), std::string::npos);

  std::string edited = story;
  edited[0] = 'X';  // same size
  ASSERT_TRUE(WriteFileAtomically(text, edited).ok());
  auto edit = PrepareCorpus(o, say);
  ASSERT_TRUE(edit.ok()) << edit.status();
  EXPECT_TRUE(*edit);
  auto train = ReadFile(out + "/data/train.txt");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ((*train)[0], 'X');
  EXPECT_FALSE(FileExists(out + "/sweep"));
  EXPECT_TRUE(FileExists(out + "/sweep.superseded-1/results.csv"));
  for (const char* made : {"/tokenizer.lmftok", "/data/train.tok", "/data/val.tok"}) {
    EXPECT_FALSE(FileExists(out + made)) << made;
  }
  EXPECT_NE(said.find("the corpus changed since the sweep in " + out + "/sweep trained on it"),
            std::string::npos)
      << said;
}

// Text too small for one training batch is refused once, before any run starts, with the trainer's own
// message (every run failed with it, one after another, before the "no finished run" end).
TEST(Quickstart, TooLittleTextIsRefusedBeforeAnyRun) {
  const std::string out = std::string(std::getenv("TEST_TMPDIR")) + "/qs_small";
  const std::string text_path = std::string(std::getenv("TEST_TMPDIR")) + "/small.txt";
  std::string text;
  for (int i = 0; i < 40; ++i) text += "A short story about a cat and a dog.\n";  // ~1.5 KB
  ASSERT_TRUE(WriteFileAtomically(text_path, text).ok());
  QuickstartOptions o = TinyOptions(out);
  o.data = {text_path};
  auto result = RunQuickstart(o);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("--data: too little text for the sweep's runs: "),
            std::string::npos)
      << result.status();
  EXPECT_NE(result.status().message().find("tokens are too few for one batch"), std::string::npos)
      << result.status();
  // And what to change in the quickstart's own terms (its runs' eval_tokens is not a quickstart flag).
  EXPECT_NE(result.status().message().find("The quickstart holds out the last ~2% of each --data file for "
                                           "validation and evaluates on 16384 tokens of it"),
            std::string::npos)
      << result.status();
  EXPECT_FALSE(FileExists(out + "/sweep/runs")) << "a run was started";
}

TEST(Quickstart, MissingDataFileIsAClearError) {
  QuickstartOptions o = TinyOptions(std::string(std::getenv("TEST_TMPDIR")) + "/qs_bad");
  o.data = {"/nonexistent/corpus.txt"};
  auto result = RunQuickstart(o);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("--data: /nonexistent/corpus.txt"), std::string::npos)
      << result.status();
  EXPECT_FALSE(FileExists(o.out_dir + "/data")) << "an empty data folder left behind";
}

}  // namespace
}  // namespace lmf::quickstart
