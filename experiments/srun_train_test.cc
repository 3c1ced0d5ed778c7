// `train` under srun (train_main.cc, distributed/slurm_task.h), against a real single-node Slurm that
// tools/slurm/with_local_slurm.sh starts around this test: a 2-task `srun` data-parallel run of the tiny model
// ends with the same weights, bit for bit, and the same losses at every step as the same run that `train`
// launches itself (rank 0 starting rank 1); a task count other than run.parallel.data is refused, naming
// both. Skips, naming what is missing, where Slurm cannot start (LMF_SLURM_UNAVAILABLE).
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/subprocess.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/sweep/sweep_testing.h"
#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

using sweep::testing::TmpDir;

class SrunTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* why = std::getenv("LMF_SLURM_UNAVAILABLE"); why != nullptr)
      GTEST_SKIP() << "no Slurm to test against: " << why;
    if (std::getenv("SLURM_CONF") == nullptr)
      GTEST_SKIP() << "no Slurm to test against: run this test under tools/slurm/with_local_slurm.sh";
    ::setenv("LMF_NUM_THREADS", "1", 1);  // the same threads both ways (srun passes the environment on)
  }
};

// The train command of a 6-step data-parallel run of the tiny model into TmpDir()/<folder>.
std::vector<std::string> TrainCommand(const std::string& folder, int data) {
  return {std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/train",
          "--config=experiments/configs/tiny.textproto",
          "--set=data.train_tokens=" + sweep::testing::TinyTokens().train,
          "--set=data.val_tokens=" + sweep::testing::TinyTokens().val,
          "--set=run.eval_tokens=256",
          "--set=run.eval_interval=3",
          "--set=run.max_steps=6",
          "--set=schedule.warmup=2",
          "--set=run.grad_accum_steps=2",
          absl::StrCat("--set=run.parallel.data=", data),
          "--set=run.output_dir=" + TmpDir() + "/" + folder};
}

std::string RunToEnd(const std::vector<std::string>& argv, int* exit_code) {
  absl::StatusOr<CommandOutput> output = RunCommand(argv, 300);
  EXPECT_TRUE(output.ok()) << output.status();
  *exit_code = output.ok() ? output->exit_code : -1;
  return output.ok() ? output->out + output->err : "";
}

TEST_F(SrunTrain, TwoTasksTrainAsTheLaunchersTwoRanks) {
  int code = 0;
  std::string out = RunToEnd(TrainCommand("launched", 2), &code);
  ASSERT_EQ(code, 0) << out;
  std::vector<std::string> srun = {"srun", "--ntasks=2", "--cpus-per-task=1", "--kill-on-bad-exit=1"};
  const std::vector<std::string> train = TrainCommand("srun", 2);
  srun.insert(srun.end(), train.begin(), train.end());
  out = RunToEnd(srun, &code);
  ASSERT_EQ(code, 0) << out;

  const std::string weights = "/checkpoints/step_00000006/model.safetensors";
  const absl::StatusOr<std::string> a = ReadFile(TmpDir() + "/launched" + weights);
  const absl::StatusOr<std::string> b = ReadFile(TmpDir() + "/srun" + weights);
  ASSERT_TRUE(a.ok() && b.ok()) << out;
  EXPECT_TRUE(*a == *b) << "the final weights differ";
  auto launched = ReadMetricsLog(TmpDir() + "/launched/metrics.jsonl");
  auto under_srun = ReadMetricsLog(TmpDir() + "/srun/metrics.jsonl");
  ASSERT_TRUE(launched.ok() && under_srun.ok());
  ASSERT_EQ(launched->size(), 6u);
  ASSERT_EQ(under_srun->size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    SCOPED_TRACE(absl::StrCat("step ", i + 1));
    EXPECT_EQ((*launched)[i].loss, (*under_srun)[i].loss);
    EXPECT_EQ((*launched)[i].val_loss, (*under_srun)[i].val_loss);
  }
  // The step's rendezvous folder is gone with it; rank 1 never started a process of its own.
  EXPECT_FALSE(FileExists(TmpDir() + "/srun/rank_1.log"));
  std::vector<std::string> left = ListFolder(TmpDir() + "/srun").value_or(std::vector<std::string>{});
  for (const std::string& name : left) EXPECT_FALSE(absl::StartsWith(name, ".srun-")) << name;
}

TEST_F(SrunTrain, ATaskCountOtherThanParallelDataIsRefused) {
  std::vector<std::string> srun = {"srun", "--ntasks=2", "--cpus-per-task=1"};
  const std::vector<std::string> train = TrainCommand("mismatch", 1);
  srun.insert(srun.end(), train.begin(), train.end());
  int code = 0;
  const std::string out = RunToEnd(srun, &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "srun started 2 tasks but run.parallel.data=1")) << out;
}

}  // namespace
}  // namespace lmf::experiments
