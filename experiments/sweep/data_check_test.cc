// CheckRunsCanReadTheirData: the trainer's token-file rules applied to every distinct run of a plan up front,
// naming the sweep file and the first run that would fail.
#include "experiments/sweep/data_check.h"

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "base/file.h"
#include "experiments/sweep/runner.h"
#include "gtest/gtest.h"
#include "tokenizer/token_file.h"

namespace lmf::sweep {
namespace {

std::string TokenFile(const std::string& name, int tokens) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  auto writer = tokenizer::TokenFileWriter::Create(path, 64, 0);
  EXPECT_TRUE(writer.ok()) << writer.status();
  std::vector<uint32_t> ids(tokens);
  for (int i = 0; i < tokens; ++i) ids[i] = static_cast<uint32_t>(i % 64);
  EXPECT_TRUE(writer->Append(ids.data(), ids.size()).ok());
  EXPECT_TRUE(writer->Commit().ok());
  return path;
}

// Runs of batch 4, context 8 (one batch: 33 tokens) on a 100-token training file, validated on `val_tokens`
// tokens with run.eval_tokens = `eval_tokens`.
SweepPlan Plan(int val_tokens, int eval_tokens, int batch_of_second_run) {
  SweepPlan plan;
  plan.source = "test.sweep";
  for (int batch : {4, batch_of_second_run}) {
    PlannedRun run;
    run.name = "run_b" + std::to_string(batch);
    config::Experiment& e = run.experiment;
    e.mutable_model()->set_vocab_size(64);
    e.mutable_model()->set_context_length(8);
    e.mutable_data()->set_train_tokens(TokenFile("train.tok", 100));
    e.mutable_data()->set_val_tokens(TokenFile("val.tok", val_tokens));
    e.mutable_run()->set_batch_size(batch);
    e.mutable_run()->set_eval_tokens(eval_tokens);
    plan.runs.push_back(run);
  }
  return plan;
}

TEST(SweepDataCheck, AcceptsDataEveryRunCanRead) {
  EXPECT_TRUE(CheckRunsCanReadTheirData(Plan(65, 64, 3)).ok());
}

// A run that finished earlier will not train again: its data is not checked (its files may be gone).
TEST(SweepDataCheck, RunsThatFinishedAreNotChecked) {
  SweepPlan plan = Plan(65, 64, 16);
  plan.output_dir = std::string(std::getenv("TEST_TMPDIR")) + "/finished_sweep";
  config::SweepRunResult finished;
  finished.set_status(config::SweepRunResult::FINISHED);
  ASSERT_TRUE(MakeDirs(plan.output_dir + "/runs/run_b16").ok());
  ASSERT_TRUE(WriteRunResult(plan.output_dir + "/runs/run_b16", finished).ok());
  EXPECT_TRUE(CheckRunsCanReadTheirData(plan).ok());
}

TEST(SweepDataCheck, NamesTheRunWhoseBatchTheTrainingFileCannotFill) {
  const absl::Status s = CheckRunsCanReadTheirData(Plan(65, 64, 16));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("test.sweep (run run_b16): "), std::string::npos) << s;
  EXPECT_NE(s.message().find("train.tok: 100 tokens are too few for one batch"), std::string::npos) << s;
}

TEST(SweepDataCheck, NamesAValidationFileTooSmallForTheEvaluationBudget) {
  const absl::Status s = CheckRunsCanReadTheirData(Plan(65, 128, 4));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("test.sweep (run run_b4): "), std::string::npos) << s;
  EXPECT_NE(s.message().find("val.tok: 65 tokens are too few for the validation budget"), std::string::npos)
      << s;
}

}  // namespace
}  // namespace lmf::sweep
