// //distributed:launch with real workers (launch_test_worker): each gets torchrun's variables and the ranks
// meet through rank 0's TCP store, on one machine and as two machines (two launchers, --nnodes=2, on
// loopback); a worker that fails or is killed is named, with its status and last lines, and every process
// exits within a few seconds with that status; bad command lines are refused with exit status 2; each line
// the workers print reaches the launcher's output whole, behind its rank's prefix.

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/subprocess.h"
#include "distributed/launched_rank.h"
#include "gtest/gtest.h"

namespace lmf::distributed {
namespace {

std::string Runfile(const std::string& path) { return absl::StrCat(std::getenv("TEST_SRCDIR"), "/lmforge/", path); }

// Runs the launcher with `flags` on the test worker; its output and status.
CommandOutput RunLauncher(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {Runfile("distributed/launch")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--");
  argv.push_back(Runfile("distributed/launch_test_worker"));
  absl::StatusOr<CommandOutput> output = RunCommand(argv, 60);
  EXPECT_TRUE(output.ok()) << output.status();
  return output.ok() ? *output : CommandOutput{-1, "", ""};
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class Launch : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"LAUNCH_TEST_FAIL_RANK", "LAUNCH_TEST_FAIL_HOW", "LAUNCH_TEST_STEPS", "LAUNCH_TEST_LINES"})
      ::unsetenv(name);
    ::setenv("LMF_NUM_THREADS", "1", 1);
  }
  static void Expect(int world, int nproc) {
    ::setenv("LAUNCH_TEST_WORLD", std::to_string(world).c_str(), 1);
    ::setenv("LAUNCH_TEST_NPROC", std::to_string(nproc).c_str(), 1);
  }
};

TEST_F(Launch, WorkersGetTorchrunsVariablesAndMeetOnOneMachine) {
  Expect(3, 3);
  const CommandOutput out = RunLauncher({"--nproc_per_node=3"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  for (int rank = 0; rank < 3; ++rank) EXPECT_TRUE(absl::StrContains(out.out, absl::StrCat("worker ", rank, " of 3: passed"))) << out.out;
}

// 3 workers each print 300 lines of 230 bytes in two writes apiece (more than a pipe holds, so they go on
// only while the launcher reads): every line of the launcher's stdout is one worker's whole line behind
// its rank's prefix, each rank's in order; a last line without a newline gets one. --prefix_output=false: none.
TEST_F(Launch, EachLineIsWholeAndPrefixedWithItsRank) {
  Expect(3, 3);
  ::setenv("LAUNCH_TEST_LINES", "300", 1);
  const CommandOutput out = RunLauncher({"--nproc_per_node=3"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  std::vector<int> next(3, 0);
  for (const absl::string_view line : absl::StrSplit(out.out, '\n', absl::SkipEmpty())) {
    int rank = -1;
    for (int r = 0; r < 3; ++r)
      if (absl::StartsWith(line, absl::StrCat("[rank ", r, "] "))) rank = r;
    ASSERT_GE(rank, 0) << "a line without a rank's prefix: " << line;
    const std::string want = next[rank] < 300 ? absl::StrCat("[rank ", rank, "] line ", next[rank], " of worker ", rank,
                                                             ": ", std::string(200, 'x'))
                                              : absl::StrCat("[rank ", rank, "] worker ", rank, " of 3: passed");
    ASSERT_EQ(line, want);
    ++next[rank];
  }
  EXPECT_EQ(next, std::vector<int>(3, 301));
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_TRUE(absl::StrContains(out.err, absl::StrCat("[rank ", rank, "] worker ", rank, ": last words\n"))) << out.err;

  ::setenv("LAUNCH_TEST_LINES", "1", 1);
  const CommandOutput plain = RunLauncher({"--nproc_per_node=3", "--prefix_output=false"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_TRUE(absl::StrContains(plain.out, "worker 2 of 3: passed") && !absl::StrContains(plain.out, "[rank"))
      << plain.out;
}

TEST_F(Launch, TwoLaunchersMeetAsTwoMachines) {
  Expect(4, 2);
  absl::StatusOr<int> port = FreeLoopbackPort();  // for node 0's rank 0 to serve the store on
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string rdzv = absl::StrCat("--rdzv=127.0.0.1:", *port);
  CommandOutput node1;
  std::thread second([&] { node1 = RunLauncher({"--nproc_per_node=2", "--nnodes=2", "--node_rank=1", rdzv}); });
  const CommandOutput node0 = RunLauncher({"--nproc_per_node=2", "--nnodes=2", "--node_rank=0", rdzv});
  second.join();
  ASSERT_EQ(node0.exit_code, 0) << node0.err;
  ASSERT_EQ(node1.exit_code, 0) << node1.err;
  EXPECT_TRUE(absl::StrContains(node0.out, "worker 0 of 4: passed") && absl::StrContains(node0.out, "worker 1 of 4: passed")) << node0.out;
  EXPECT_TRUE(absl::StrContains(node1.out, "worker 2 of 4: passed") && absl::StrContains(node1.out, "worker 3 of 4: passed")) << node1.out;
}

TEST_F(Launch, AFailingWorkerIsNamedAndEveryoneExitsWithItsStatus) {
  Expect(3, 3);
  ::setenv("LAUNCH_TEST_STEPS", "300", 1);  // 30 s of steps unless the failure stops them
  ::setenv("LAUNCH_TEST_FAIL_RANK", "1", 1);
  ::setenv("LAUNCH_TEST_FAIL_HOW", "exit", 1);
  const std::string logs = absl::StrCat(std::getenv("TEST_TMPDIR"), "/failing");
  const auto start = std::chrono::steady_clock::now();
  const CommandOutput out = RunLauncher({"--nproc_per_node=3", "--log_dir=" + logs});
  EXPECT_LT(SecondsSince(start), 15);
  EXPECT_EQ(out.exit_code, 7) << out.err;
  EXPECT_TRUE(absl::StrContains(out.err, "launch: rank 1 exited with status 7 (" + logs + "/rank_1.log: ")) << out.err;
  EXPECT_TRUE(absl::StrContains(out.err, "worker 1: planted failure at step 2")) << out.err;
}

TEST_F(Launch, AKilledWorkerIsNamedAndEveryoneExits) {
  Expect(2, 2);
  ::setenv("LAUNCH_TEST_STEPS", "300", 1);
  ::setenv("LAUNCH_TEST_FAIL_RANK", "0", 1);  // the rank that serves the store
  ::setenv("LAUNCH_TEST_FAIL_HOW", "kill", 1);
  const auto start = std::chrono::steady_clock::now();
  const CommandOutput out = RunLauncher({"--nproc_per_node=2"});
  EXPECT_LT(SecondsSince(start), 15);
  EXPECT_EQ(out.exit_code, 128 + 9) << out.err;
  EXPECT_TRUE(absl::StrContains(out.err, "launch: rank 0 was killed by signal 9")) << out.err;
}

TEST_F(Launch, BadCommandLinesAreRefused) {
  Expect(2, 2);
  CommandOutput out = RunLauncher({"--nproc_per_node=2", "--nnodes=2"});
  EXPECT_EQ(out.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(out.err, "--nnodes > 1 needs --rdzv=HOST:PORT")) << out.err;
  out = RunLauncher({"--nproc_per_node=2", "--nnodes=2", "--node_rank=2", "--rdzv=127.0.0.1:1"});
  EXPECT_EQ(out.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(out.err, "--node_rank=2: expected less than --nnodes=2")) << out.err;
  out = RunLauncher({"--nproc_per_node=2", "--rdzv=localhost"});
  EXPECT_EQ(out.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(out.err, "--rdzv=localhost: expected HOST:PORT")) << out.err;
  absl::StatusOr<CommandOutput> bare = RunCommand({Runfile("distributed/launch"), "--nproc_per_node=2"}, 30);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->exit_code, 2);
  EXPECT_TRUE(absl::StrContains(bare->err, "no command")) << bare->err;
}

}  // namespace
}  // namespace lmf::distributed
