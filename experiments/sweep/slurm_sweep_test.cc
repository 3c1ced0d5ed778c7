// The sweep's Slurm executor against a real single-node Slurm (run under tools/slurm/with_local_slurm.sh by
// the slurm_sweep_test target): a small sweep of the tiny model through `--executor=slurm --wait` finishes
// every run with the local executor's results.csv, byte for byte; a second submission submits nothing; a
// task stopped mid-run by `scancel --signal=TERM` requeues and ends with the uninterrupted run's loss and
// curve. Also: the errors for Slurm commands that are missing or that refuse. Skips, naming what is
// missing, where Slurm cannot start (LMF_SLURM_UNAVAILABLE).
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/subprocess.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/sweep/runner.h"
#include "experiments/sweep/sweep_testing.h"
#include "gtest/gtest.h"

namespace lmf::sweep {
namespace {

using testing::TmpDir;

// Each sweep command may take this long (the tiny runs train in seconds; Slurm schedules within seconds).
constexpr double kCommandSeconds = 600;

void SkipWithoutSlurm() {
  if (const char* why = std::getenv("LMF_SLURM_UNAVAILABLE"); why != nullptr)
    GTEST_SKIP() << "no Slurm to test against: " << why;
  if (std::getenv("SLURM_CONF") == nullptr)
    GTEST_SKIP() << "no Slurm to test against: run this test under tools/slurm/with_local_slurm.sh";
}

std::string SweepBinary() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/sweep/sweep";
}

// A sweep of the tiny model into TmpDir()/<folder>: runs of 6 and 10 steps, `max_steps` more if given
// (evaluated 3 times each); returns the sweep file's path.
std::string WriteSweep(const std::string& folder, const std::vector<std::string>& max_steps = {"6", "10"}) {
  char cwd[PATH_MAX];
  EXPECT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  std::string values;
  for (const std::string& steps : max_steps) absl::StrAppend(&values, values.empty() ? "" : ", ", "\"", steps, "\"");
  const std::string text = absl::StrCat(
      "name: \"slurm_test\"\noutput_dir: \"", TmpDir(), "/", folder, "\"\nbase_experiment: \"", cwd,
      "/experiments/configs/tiny.textproto\"\nparallel_runs: 2\nevals_per_run: 3\n",
      "set: [\"data.train_tokens=", testing::TinyTokens().train, "\", \"data.val_tokens=",
      testing::TinyTokens().val, "\", \"run.eval_tokens=256\", \"schedule.warmup=2\"]\n",
      "grid { axis { field: \"run.max_steps\" values: [", values, "] } }\n");
  const std::string path = absl::StrCat(TmpDir(), "/", folder, ".sweep");
  EXPECT_TRUE(WriteFileAtomically(path, text).ok());
  return path;
}

// Runs the sweep binary; returns its output (stdout then stderr) and sets *exit_code.
std::string Sweep(const std::vector<std::string>& flags, int* exit_code) {
  std::vector<std::string> argv = {SweepBinary()};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<CommandOutput> output = RunCommand(argv, kCommandSeconds);
  EXPECT_TRUE(output.ok()) << output.status();
  if (!output.ok()) {
    *exit_code = -1;
    return "";
  }
  *exit_code = output->exit_code;
  return output->out + output->err;
}

std::string ReadOrEmpty(const std::string& path) { return ReadFile(path).value_or(""); }

// For a failure message: a task's Slurm output and what the controller logged of it.
std::string SlurmLogs(const std::string& sweep_dir, const std::string& task) {
  std::string controller;
  const std::string conf = std::getenv("SLURM_CONF") != nullptr ? std::getenv("SLURM_CONF") : "";
  const std::string job = task.substr(0, task.find('_'));
  for (absl::string_view line : absl::StrSplit(ReadOrEmpty(conf.substr(0, conf.rfind('/')) + "/slurmctld.log"), '\n')) {
    if (absl::StrContains(line, "JobId=" + job) || absl::StrContains(line, "JobId=" + task))
      absl::StrAppend(&controller, line, "\n");
  }
  return absl::StrCat("\n--- ", task, ".out:\n", ReadOrEmpty(sweep_dir + "/slurm/" + task + ".out"),
                      "--- slurmctld.log:\n", controller);
}

class SlurmSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    SkipWithoutSlurm();
    // The same threads in both executors, so that their losses agree bit for bit.
    ::setenv("LMF_NUM_THREADS", "1", 1);
  }
};

TEST_F(SlurmSweep, FinishesEveryRunWithTheLocalExecutorsResultsAndSubmitsNothingTheSecondTime) {
  int code = 0;
  const std::string slurm_sweep = WriteSweep("on_slurm");
  std::string out = Sweep({"--sweep=" + slurm_sweep, "--executor=slurm", "--wait", "--poll_seconds=0.5",
                           "--max_concurrent=2"},
                          &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "2 runs submitted as job array")) << out;
  EXPECT_TRUE(absl::StrContains(out, "[slurm] 2 finished, 0 failed, 0 running, 0 pending")) << out;
  const std::string local_sweep = WriteSweep("local");
  const std::string local_out = Sweep({"--sweep=" + local_sweep}, &code);
  ASSERT_EQ(code, 0) << local_out;

  const std::string slurm_results = ReadOrEmpty(TmpDir() + "/on_slurm/results.csv");
  ASSERT_FALSE(slurm_results.empty()) << out;
  EXPECT_EQ(slurm_results, ReadOrEmpty(TmpDir() + "/local/results.csv"));
  EXPECT_TRUE(FileExists(TmpDir() + "/on_slurm/report/report.md")) << out;
  for (const std::string run : {"max_steps=6", "max_steps=10"}) {
    SCOPED_TRACE(run);
    EXPECT_EQ(ReadOrEmpty(TmpDir() + "/on_slurm/runs/" + run + "/curve.csv"),
              ReadOrEmpty(TmpDir() + "/local/runs/" + run + "/curve.csv"));
    EXPECT_TRUE(absl::StrContains(ReadOrEmpty(TmpDir() + "/on_slurm/runs/" + run + "/log.txt"), "Slurm task "));
  }

  const std::string jobs = ReadOrEmpty(TmpDir() + "/on_slurm/slurm/jobs.txt");
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(jobs, '\n', absl::SkipEmpty())).size(), 2u) << jobs;
  out = Sweep({"--sweep=" + slurm_sweep, "--executor=slurm"}, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "0 runs submitted, 0 queued before, 2 finished earlier")) << out;
  EXPECT_EQ(ReadOrEmpty(TmpDir() + "/on_slurm/slurm/jobs.txt"), jobs);
}

// A run long enough to be caught mid-way: stopped by SIGTERM through Slurm, it checkpoints, its task
// requeues itself, and the sweep started again follows it (submitting nothing) to the uninterrupted loss.
TEST_F(SlurmSweep, ATaskStoppedBySigtermRequeuesAndEndsWithTheUninterruptedLoss) {
  const std::vector<std::string> steps = {"400"};
  const std::string sweep = WriteSweep("preempted", steps);
  int code = 0;
  std::string out = Sweep({"--sweep=" + sweep, "--executor=slurm"}, &code);
  ASSERT_EQ(code, 0) << out;
  const std::string sweep_dir = TmpDir() + "/preempted";
  const std::string run_dir = sweep_dir + "/runs/max_steps=400";
  const std::vector<std::string> jobs =
      absl::StrSplit(ReadOrEmpty(TmpDir() + "/preempted/slurm/jobs.txt"), ' ');
  ASSERT_EQ(jobs.size(), 2u);
  const std::string task = jobs[0];
  // Signalled once it trains (its stop handling is in place by its first logged step), well before its end.
  bool training = false;
  for (int i = 0; i < 6000 && !training; ++i) {
    auto lines = experiments::ReadMetricsLog(run_dir + "/metrics.jsonl");
    training = lines.ok() && !lines->empty();
    if (!training) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(training) << ReadOrEmpty(run_dir + "/log.txt");
  absl::StatusOr<CommandOutput> cancel = RunCommand({"scancel", "--signal=TERM", task}, 60);
  ASSERT_TRUE(cancel.ok() && cancel->exit_code == 0) << cancel.status() << (cancel.ok() ? cancel->err : "");
  // Slurm holds a requeued job for two minutes (Reason=BeginTime); the test lets it start at once.
  const std::string held = "PENDING BeginTime";
  std::string state;
  for (int i = 0; i < 600 && !absl::StartsWith(state, held); ++i) {
    absl::StatusOr<CommandOutput> queued = RunCommand({"squeue", "--noheader", "--jobs=" + task, "--format=%T %r"}, 60);
    state = queued.ok() ? queued->out : "";
    if (!absl::StartsWith(state, held)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(absl::StartsWith(state, held)) << state << SlurmLogs(sweep_dir, task) << ReadOrEmpty(run_dir + "/log.txt");
  absl::StatusOr<CommandOutput> release = RunCommand({"scontrol", "update", "JobId=" + task, "StartTime=now"}, 60);
  ASSERT_TRUE(release.ok() && release->exit_code == 0) << release.status() << (release.ok() ? release->err : "");

  out = Sweep({"--sweep=" + sweep, "--executor=slurm", "--wait", "--poll_seconds=0.5"}, &code);
  ASSERT_EQ(code, 0) << out << ReadOrEmpty(run_dir + "/log.txt");
  EXPECT_TRUE(absl::StrContains(out, "0 runs submitted, 1 queued before")) << out << SlurmLogs(sweep_dir, task);
  const std::string log = ReadOrEmpty(run_dir + "/log.txt");
  EXPECT_TRUE(absl::StrContains(log, "stopped by a signal after a checkpoint: task " + task + " requeues")) << log;
  EXPECT_TRUE(absl::StrContains(log, "restart 1)")) << log;

  const std::string reference = WriteSweep("uninterrupted", steps);
  out = Sweep({"--sweep=" + reference}, &code);
  ASSERT_EQ(code, 0) << out;
  auto stopped = ReadRunResult(run_dir);
  auto whole = ReadRunResult(TmpDir() + "/uninterrupted/runs/max_steps=400");
  ASSERT_TRUE(stopped.ok() && whole.ok());
  EXPECT_EQ(stopped->status(), config::SweepRunResult::FINISHED);
  EXPECT_EQ(stopped->final_loss(), whole->final_loss());
  EXPECT_EQ(stopped->best_val_loss(), whole->best_val_loss());
  EXPECT_EQ(ReadOrEmpty(run_dir + "/curve.csv"), ReadOrEmpty(TmpDir() + "/uninterrupted/runs/max_steps=400/curve.csv"));
}

TEST_F(SlurmSweep, SbatchRefusingIsAnErrorQuotingIt) {
  int code = 0;
  const std::string out =
      Sweep({"--sweep=" + WriteSweep("refused"), "--executor=slurm", "--partition=no_such_partition"}, &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "sbatch")) << out;
  EXPECT_TRUE(absl::StrContains(out, "refused")) << out;
  EXPECT_TRUE(absl::StrContains(out, "invalid partition")) << out;
}

// Needs no Slurm: with no Slurm command on PATH the sweep says where to run it.
TEST(SlurmSweepWithoutSlurm, MissingSlurmCommandsSayWhereToRun) {
  const std::string sweep = WriteSweep("no_slurm");
  const char* path = std::getenv("PATH");
  const std::string saved = path != nullptr ? path : "";
  ::setenv("PATH", TmpDir().c_str(), 1);  // (RunCommand finds the sweep binary by its full path)
  int code = 0;
  const std::string out = Sweep({"--sweep=" + sweep, "--executor=slurm"}, &code);
  ::setenv("PATH", saved.c_str(), 1);
  EXPECT_EQ(code, 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "--executor=slurm: no squeue on PATH")) << out;
  EXPECT_TRUE(absl::StrContains(out, "login node")) << out;
}

}  // namespace
}  // namespace lmf::sweep
