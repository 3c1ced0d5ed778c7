// The launcher and the rendezvous folder with real worker processes (/bin/sh scripts): each worker gets its
// rank's environment and log, says it is up, and one that exits early, is killed or will not stop is named
// or ended in bounded time.
#include "distributed/launcher.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "distributed/rendezvous.h"
#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

std::string TempFolder(const std::string& name) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  EXPECT_TRUE(MakeDirs(path).ok());
  return path;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Workers running `script` under /bin/sh, with RANK and READY_DIR (`folder`) in their environment.
LaunchOptions ShellWorkers(int world, const std::string& folder, const std::string& script) {
  LaunchOptions options;
  options.command = {"/bin/sh", "-c", script};
  options.world_size = world;
  options.log_dir = folder;
  options.environment = [folder](int rank) {
    return std::vector<std::pair<std::string, std::string>>{{"RANK", std::to_string(rank)},
                                                            {"READY_DIR", folder}};
  };
  return options;
}

TEST(Launcher, WorkersGetTheirRanksEnvironmentAndLogAndSayTheyAreUp) {
  const std::string folder = TempFolder("launch_ok");
  LaunchOptions options =
      ShellWorkers(3, folder, "echo \"rank $RANK says hello\"; : > \"$READY_DIR/ready.$RANK\"; exit 0");
  options.log_header = [](int rank) { return absl::StrCat("==== start of rank ", rank, "\n"); };
  absl::StatusOr<std::unique_ptr<WorkerProcesses>> workers = WorkerProcesses::Start(options);
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_TRUE((*workers)->WaitUntilReady(folder, std::chrono::seconds(20)).ok());
  EXPECT_TRUE((*workers)->Wait().ok());
  EXPECT_FALSE(FileExists(folder + "/rank_0.log")) << "rank 0 is this process: not started";
  for (int rank = 1; rank < 3; ++rank) {
    absl::StatusOr<std::string> log = ReadFile((*workers)->LogPath(rank));
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_EQ(*log, absl::StrCat("==== start of rank ", rank, "\nrank ", rank, " says hello\n"));
  }
}

// Rank 1 never says it is up; rank 2 fails before it does: the wait ends at once, naming rank 2, its exit
// status and its log's last lines, not after the 30 s timeout.
TEST(Launcher, AWorkerThatExitsBeforeItIsUpIsNamedAtOnce) {
  const std::string folder = TempFolder("launch_dies");
  LaunchOptions options = ShellWorkers(
      3, folder,
      "if [ $RANK = 2 ]; then echo first >&2; echo gloo device failed >&2; exit 3; fi; exec sleep 30");
  absl::StatusOr<std::unique_ptr<WorkerProcesses>> workers = WorkerProcesses::Start(options);
  ASSERT_TRUE(workers.ok()) << workers.status();
  const auto start = std::chrono::steady_clock::now();
  const absl::Status ready = (*workers)->WaitUntilReady(folder, std::chrono::seconds(30));
  EXPECT_LT(SecondsSince(start), 10.0);
  EXPECT_EQ(ready.code(), absl::StatusCode::kUnavailable) << ready;
  EXPECT_EQ(ready.message(), absl::StrCat("rank 2 exited with status 3 (", folder,
                                          "/rank_2.log: first | gloo device failed)"));
  workers->reset();  // stops rank 1 (SIGTERM ends `sleep`)
  EXPECT_LT(SecondsSince(start), 10.0);
}

TEST(Launcher, TheWaitForWorkersToComeUpEnds) {
  const std::string folder = TempFolder("launch_slow");
  absl::StatusOr<std::unique_ptr<WorkerProcesses>> workers =
      WorkerProcesses::Start(ShellWorkers(2, folder, "exec sleep 30"));
  ASSERT_TRUE(workers.ok()) << workers.status();
  const auto start = std::chrono::steady_clock::now();
  const absl::Status ready = (*workers)->WaitUntilReady(folder, std::chrono::milliseconds(300));
  EXPECT_GE(SecondsSince(start), 0.3);
  EXPECT_EQ(ready.code(), absl::StatusCode::kDeadlineExceeded) << ready;
  EXPECT_EQ(ready.message(), "the workers did not start within 300 ms (see rank_<r>.log)");
}

TEST(Launcher, WaitNamesEachWorkerThatFailed) {
  const std::string folder = TempFolder("launch_fail");
  absl::StatusOr<std::unique_ptr<WorkerProcesses>> workers = WorkerProcesses::Start(ShellWorkers(
      4, folder, "if [ $RANK = 1 ]; then kill -9 $$; fi; if [ $RANK = 3 ]; then exit 4; fi; exit 0"));
  ASSERT_TRUE(workers.ok()) << workers.status();
  const absl::Status waited = (*workers)->Wait();
  EXPECT_EQ(waited.code(), absl::StatusCode::kInternal) << waited;
  EXPECT_EQ(waited.message(),
            absl::StrCat("rank 1 was killed by signal 9 (", folder, "/rank_1.log: ); rank 3 exited ",
                         "with status 4 (", folder, "/rank_3.log: )"));
  EXPECT_EQ((*workers)->DeadWorkers(std::chrono::milliseconds(0)), "") << "all reaped by Wait";
}

// A worker that ignores SIGTERM is killed stop_grace later; Stop returns with every worker reaped.
TEST(Launcher, StopKillsAWorkerThatIgnoresSigterm) {
  const std::string folder = TempFolder("launch_stubborn");
  LaunchOptions options =
      ShellWorkers(2, folder, "trap '' TERM; : > \"$READY_DIR/ready.$RANK\"; while :; do sleep 0.05; done");
  options.stop_grace = std::chrono::milliseconds(400);
  absl::StatusOr<std::unique_ptr<WorkerProcesses>> workers = WorkerProcesses::Start(options);
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_TRUE((*workers)->WaitUntilReady(folder, std::chrono::seconds(20)).ok());
  const auto start = std::chrono::steady_clock::now();
  (*workers)->Stop();
  const double took = SecondsSince(start);
  EXPECT_GE(took, 0.4);
  EXPECT_LT(took, 5.0);
  const absl::Status waited = (*workers)->Wait();
  EXPECT_NE(waited.message().find("rank 1 was killed by signal 9"), std::string::npos) << waited;
}

TEST(Rendezvous, FoldersAreUniqueRemovedAfterwardsAndStaleOnesRemovable) {
  const std::string parent = TempFolder("rendezvous_parent");
  std::string first_path;
  {
    absl::StatusOr<std::unique_ptr<RendezvousFolder>> first = RendezvousFolder::Create(parent, ".launch-");
    absl::StatusOr<std::unique_ptr<RendezvousFolder>> second = RendezvousFolder::Create(parent, ".launch-");
    ASSERT_TRUE(first.ok() && second.ok());
    first_path = (*first)->path();
    EXPECT_NE(first_path, (*second)->path());
    EXPECT_EQ(first_path.rfind(parent + "/.launch-" + std::to_string(::getpid()) + "-", 0), 0u) << first_path;
    EXPECT_FALSE(IsReady(first_path, 3));
    ASSERT_TRUE(MarkReady(first_path, 3).ok());
    EXPECT_TRUE(IsReady(first_path, 3));
    EXPECT_FALSE(IsReady(first_path, 2));
  }
  EXPECT_FALSE(FileExists(first_path)) << "removed with its files";

  // A killed launch's folders (with files) go; others stay.
  ASSERT_TRUE(MakeDirs(parent + "/.launch-1-2").ok());
  ASSERT_TRUE(MarkReady(parent + "/.launch-1-2", 1).ok());
  ASSERT_TRUE(MakeDirs(parent + "/checkpoints").ok());
  ASSERT_TRUE(RemoveStaleRendezvousFolders(parent, ".launch-").ok());
  EXPECT_FALSE(FileExists(parent + "/.launch-1-2"));
  EXPECT_TRUE(FileExists(parent + "/checkpoints"));
}

TEST(Launcher, ThreadsPerRankIsTheUsersCountOrAShareOfTheMachine) {
  const int share = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 3);
  ASSERT_EQ(::unsetenv("LMF_NUM_THREADS"), 0);
  EXPECT_EQ(ThreadsPerRank(3), share);
  EXPECT_EQ(ThreadsPerRank(100000), 1);
  ASSERT_EQ(::setenv("LMF_NUM_THREADS", "5", 1), 0);
  EXPECT_EQ(ThreadsPerRank(3), 5);
  ASSERT_EQ(::setenv("LMF_NUM_THREADS", "100000", 1), 0);
  EXPECT_EQ(ThreadsPerRank(3), 1024);
  ASSERT_EQ(::setenv("LMF_NUM_THREADS", "many", 1), 0);
  EXPECT_EQ(ThreadsPerRank(3), share);
  ::unsetenv("LMF_NUM_THREADS");
}

}  // namespace
}  // namespace lmf::distributed
