// `train` started by //distributed:launch (train_main.cc, distributed/launched_rank.h): a 2-process
// data-parallel run of the tiny model through the launcher, on one machine and as two launchers of one
// process each (--nnodes=2 on loopback), and two processes with mpirun's variables, end with the same weights, bit for bit, and the same losses at
// every step as the run that `train` launches itself; a world size other than run.parallel.data is refused,
// naming both; SIGTERM to the launcher reaches every rank, rank 0 checkpoints, the launcher exits with the
// trainer's status 4, and the run resumed through the launcher ends with the uninterrupted run's weights.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/subprocess.h"
#include "distributed/launched_rank.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/sweep/sweep_testing.h"
#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

using sweep::testing::TmpDir;

std::string Runfile(const std::string& path) { return absl::StrCat(std::getenv("TEST_SRCDIR"), "/lmforge/", path); }

// The train command of a data-parallel run of the tiny model into TmpDir()/<folder>.
std::vector<std::string> TrainCommand(const std::string& folder, int data, int steps) {
  return {Runfile("experiments/train"),
          "--config=experiments/configs/tiny.textproto",
          "--set=data.train_tokens=" + sweep::testing::TinyTokens().train,
          "--set=data.val_tokens=" + sweep::testing::TinyTokens().val,
          "--set=run.eval_tokens=256",
          "--set=run.eval_interval=3",
          absl::StrCat("--set=run.max_steps=", steps),
          "--set=schedule.warmup=2",
          "--set=run.grad_accum_steps=2",
          absl::StrCat("--set=run.parallel.data=", data),
          "--set=run.output_dir=" + TmpDir() + "/" + folder};
}

std::vector<std::string> Launched(const std::vector<std::string>& flags, const std::vector<std::string>& command) {
  std::vector<std::string> argv = {Runfile("distributed/launch")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

CommandOutput RunToEnd(const std::vector<std::string>& argv) {
  absl::StatusOr<CommandOutput> output = RunCommand(argv, 300);
  EXPECT_TRUE(output.ok()) << output.status();
  return output.ok() ? *output : CommandOutput{-1, "", ""};
}

std::string Weights(const std::string& folder, int step) {
  return ReadFile(absl::StrCat(TmpDir(), "/", folder, "/checkpoints/step_", std::string(8 - std::to_string(step).size(), '0'),
                               step, "/model.safetensors"))
      .value_or("(no weights)");
}

// The two runs' final weights are the same bytes and their losses the same at every step.
void ExpectSameRun(const std::string& a, const std::string& b, int steps) {
  EXPECT_TRUE(Weights(a, steps) == Weights(b, steps)) << a << " and " << b << ": the final weights differ";
  auto first = ReadMetricsLog(TmpDir() + "/" + a + "/metrics.jsonl");
  auto second = ReadMetricsLog(TmpDir() + "/" + b + "/metrics.jsonl");
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(first->size(), static_cast<size_t>(steps));
  ASSERT_EQ(second->size(), static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    SCOPED_TRACE(absl::StrCat(a, " and ", b, ", step ", i + 1));
    EXPECT_EQ((*first)[i].loss, (*second)[i].loss);
    EXPECT_EQ((*first)[i].val_loss, (*second)[i].val_loss);
  }
}

class LaunchTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("LMF_NUM_THREADS", "1", 1);  // the same threads every way
    const CommandOutput out = RunToEnd(TrainCommand("builtin", 2, 6));
    ASSERT_EQ(out.exit_code, 0) << out.err;
  }
};

TEST_F(LaunchTrain, TwoLaunchedRanksTrainAsTheBuiltInLaunchersTwoRanks) {
  const CommandOutput out = RunToEnd(Launched({"--nproc_per_node=2"}, TrainCommand("launched", 2, 6)));
  ASSERT_EQ(out.exit_code, 0) << out.err;
  ExpectSameRun("builtin", "launched", 6);
  EXPECT_FALSE(FileExists(TmpDir() + "/launched/rank_1.log")) << "rank 1 started a worker of its own";
}

TEST_F(LaunchTrain, TwoLaunchersAsTwoMachinesTrainTheSameRun) {
  absl::StatusOr<int> port = distributed::FreeLoopbackPort();  // for node 0's rank 0 to serve the store on
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string rdzv = absl::StrCat("--rdzv=127.0.0.1:", *port);
  CommandOutput node1;
  std::thread second([&] {
    node1 = RunToEnd(Launched({"--nproc_per_node=1", "--nnodes=2", "--node_rank=1", rdzv}, TrainCommand("nodes", 2, 6)));
  });
  const CommandOutput node0 =
      RunToEnd(Launched({"--nproc_per_node=1", "--nnodes=2", "--node_rank=0", rdzv}, TrainCommand("nodes", 2, 6)));
  second.join();
  ASSERT_EQ(node0.exit_code, 0) << node0.err;
  ASSERT_EQ(node1.exit_code, 0) << node1.err;
  ExpectSameRun("builtin", "nodes", 6);
}

// Two processes started as mpirun starts them: OMPI_COMM_WORLD_RANK and _SIZE, MASTER_ADDR and MASTER_PORT.
TEST_F(LaunchTrain, MpirunsVariablesTrainTheSameRun) {
  absl::StatusOr<int> port = distributed::FreeLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status();
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ChildSpec child;
    child.argv = TrainCommand("mpirun", 2, 6);
    child.env = {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)}, {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(*port)}};
    child.log_path = absl::StrCat(TmpDir(), "/mpirun_rank_", rank, ".log");
    child.parent_death_signal = SIGKILL;
    absl::StatusOr<pid_t> pid = StartChild(child);
    ASSERT_TRUE(pid.ok()) << pid.status();
    ranks.push_back(*pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int rank = 0; rank < 2; ++rank) {
    int status = -1;
    pid_t reaped = 0;
    while ((reaped = ::waitpid(ranks[rank], &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (reaped == 0) {  // stalled: fail, without leaving it running
      ::kill(ranks[rank], SIGKILL);
      ::waitpid(ranks[rank], &status, 0);
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << rank << ": " << ReadFile(absl::StrCat(TmpDir(), "/mpirun_rank_", rank, ".log")).value_or("");
  }
  ExpectSameRun("builtin", "mpirun", 6);
}

TEST_F(LaunchTrain, AWorldSizeOtherThanParallelDataIsRefused) {
  const CommandOutput out = RunToEnd(Launched({"--nproc_per_node=2"}, TrainCommand("mismatch", 1, 6)));
  EXPECT_EQ(out.exit_code, 1) << out.err;
  EXPECT_TRUE(absl::StrContains(out.err, "the launcher started 2 processes (WORLD_SIZE=2) but run.parallel.data=1"))
      << out.err;
}

TEST_F(LaunchTrain, SigtermToTheLauncherCheckpointsAndTheRunResumes) {
  constexpr int kSteps = 300;
  CommandOutput out = RunToEnd(TrainCommand("whole", 2, kSteps));
  ASSERT_EQ(out.exit_code, 0) << out.err;

  ChildSpec launcher;
  launcher.argv = Launched({"--nproc_per_node=2"}, TrainCommand("stopped", 2, kSteps));
  launcher.log_path = TmpDir() + "/stopped.log";
  absl::StatusOr<pid_t> pid = StartChild(launcher);
  ASSERT_TRUE(pid.ok()) << pid.status();
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {  // until 2 steps are logged
    const std::string log = ReadFile(TmpDir() + "/stopped/metrics.jsonl").value_or("");
    if (std::count(log.begin(), log.end(), '\n') >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(::kill(*pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  const std::string log = ReadFile(launcher.log_path).value_or("");
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 4) << log;  // the trainer's "stopped by a signal"
  EXPECT_TRUE(absl::StrContains(log, "launch: got Terminated: passing it to every worker")) << log;
  EXPECT_TRUE(absl::StrContains(log, "checkpoint ")) << log;
  auto logged = ReadMetricsLog(TmpDir() + "/stopped/metrics.jsonl");
  ASSERT_TRUE(logged.ok() && !logged->empty());
  const int64_t last = logged->back().step;
  ASSERT_LT(last, kSteps) << "the run ended before the signal";
  EXPECT_FALSE(Weights("stopped", static_cast<int>(last)) == "(no weights)") << "no checkpoint at step " << last;

  std::vector<std::string> resume = TrainCommand("stopped", 2, kSteps);
  resume.push_back("--resume");
  out = RunToEnd(Launched({"--nproc_per_node=2"}, resume));
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_TRUE(Weights("whole", kSteps) == Weights("stopped", kSteps)) << "the resumed run's final weights differ";
}

}  // namespace
}  // namespace lmf::experiments
