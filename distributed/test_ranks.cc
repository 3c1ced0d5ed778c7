// RunRanks and Checks (see test_ranks.h).
#include "distributed/test_ranks.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "distributed/gloo_group.h"
#include "gtest/gtest.h"

namespace lmf::distributed::testing {
namespace {

std::string TempDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// A rank's whole life in its child process.
[[noreturn]] void RunChild(int rank, int world, const std::string& dir, const RankOptions& options,
                           const std::function<int(Collectives&)>& body) {
  const int log =
      ::open(absl::StrCat(dir, "/rank_", rank, ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (log >= 0) ::dup2(log, STDERR_FILENO);
  GlooGroupOptions group_options;
  group_options.rank = rank;
  group_options.world_size = world;
  group_options.rendezvous_dir = dir + "/rendezvous";
  group_options.timeout = options.timeout;
  group_options.connect_timeout = std::chrono::seconds(20);
  absl::StatusOr<std::unique_ptr<GlooGroup>> group = GlooGroup::Connect(group_options);
  if (!group.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, group.status().ToString().c_str());
    std::fflush(stderr);
    ::_exit(kConnectFailed);
  }
  const int code = body(**group);
  group->reset();
  std::fflush(stderr);
  ::_exit(code);
}

}  // namespace

std::vector<RankOutcome> RunRanks(int world, const std::function<int(Collectives&)>& body,
                                  const RankOptions& options) {
  static int runs = 0;
  const std::string dir = absl::StrCat(TempDir(), "/ranks_", ::getpid(), "_", runs++);
  EXPECT_TRUE(MakeDirs(dir).ok()) << dir;
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) RunChild(rank, world, dir, options, body);
    EXPECT_GT(pid, 0) << "fork failed";
    pids.push_back(pid);
  }
  std::vector<RankOutcome> outcomes(world);
  std::vector<bool> done(world, false);
  const auto deadline = std::chrono::steady_clock::now() + options.deadline;
  for (int left = world; left > 0;) {
    for (int rank = 0; rank < world; ++rank) {
      int status = 0;
      if (done[rank] || pids[rank] <= 0 || ::waitpid(pids[rank], &status, WNOHANG) != pids[rank]) continue;
      done[rank] = true;
      --left;
      if (WIFEXITED(status)) outcomes[rank].exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) outcomes[rank].signal = WTERMSIG(status);
    }
    if (left > 0 && std::chrono::steady_clock::now() >= deadline) {
      for (int rank = 0; rank < world; ++rank) {
        if (done[rank] || pids[rank] <= 0) continue;
        ::kill(pids[rank], SIGKILL);
        ::waitpid(pids[rank], nullptr, 0);
        outcomes[rank].killed_at_deadline = true;
        outcomes[rank].signal = SIGKILL;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int rank = 0; rank < world; ++rank) {
    absl::StatusOr<std::string> log = ReadFile(absl::StrCat(dir, "/rank_", rank, ".log"));
    outcomes[rank].log = log.ok() ? *log : "";
  }
  return outcomes;
}

void ExpectExitCodes(const std::vector<RankOutcome>& outcomes, const std::vector<int>& expected) {
  ASSERT_EQ(outcomes.size(), expected.size());
  std::string logs;
  bool as_expected = true;
  for (size_t rank = 0; rank < outcomes.size(); ++rank) {
    const RankOutcome& o = outcomes[rank];
    as_expected = as_expected && o.exit_code == expected[rank] && o.signal == 0;
    absl::StrAppend(&logs, "rank ", rank, ": exit code ", o.exit_code, ", signal ", o.signal,
                    o.killed_at_deadline ? " (killed at the deadline)" : "", ", expected exit code ",
                    expected[rank], "; its stderr:\n", o.log, "\n");
  }
  EXPECT_TRUE(as_expected) << logs;
}

void ExpectAllPassed(const std::vector<RankOutcome>& outcomes) {
  ExpectExitCodes(outcomes, std::vector<int>(outcomes.size(), 0));
}

int ExitCodeOf(const std::vector<RankOutcome>& outcomes) {
  int code = 0;
  for (size_t r = 0; r < outcomes.size(); ++r) {
    if (outcomes[r].exit_code != 0) {
      std::fprintf(stderr, "rank %zu failed (exit %d, signal %d):\n%s\n", r, outcomes[r].exit_code,
                   outcomes[r].signal, outcomes[r].log.c_str());
      code = 1;
    }
  }
  return code;
}

bool Checks::Expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures_;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank_, what.c_str());
    std::fflush(stderr);
  }
  return ok;
}

bool Checks::Ok(const absl::Status& status, const std::string& what) {
  return Expect(status.ok(), absl::StrCat(what, ": ", status.ToString()));
}

bool Checks::FailsWith(const absl::Status& status, const std::vector<std::string>& parts,
                       const std::string& what) {
  if (!Expect(!status.ok(), absl::StrCat(what, ": succeeded, expected an error"))) return false;
  bool all = true;
  for (const std::string& part : parts) {
    all = Expect(status.message().find(part) != std::string::npos,
                 absl::StrCat(what, ": the error does not say \"", part, "\": ", status.message())) &&
          all;
  }
  return all;
}

}  // namespace lmf::distributed::testing
