// The worker that launch_test starts through //distributed:launch: it reads its place from the launcher's
// variables (launched_rank.h), checks them against what the test expects (LAUNCH_TEST_WORLD,
// LAUNCH_TEST_NPROC), joins the group through the TCP store and runs LAUNCH_TEST_STEPS all-reduces of
// rank + 1 (each checked: world (world + 1) / 2), 100 ms apart. LAUNCH_TEST_FAIL_RANK makes that rank fail at
// the third step as LAUNCH_TEST_FAIL_HOW says: "exit" (a message, then status 7) or "kill" (SIGKILL).
// LAUNCH_TEST_LINES=N: first N lines "line i of worker r: " and 200 'x's on stdout, each in two writes, and
// "worker r: last words" without a newline on stderr at the end.
// Exit status: 0 passed, 1 a check or an op failed, 7 the planted failure.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "distributed/launched_rank.h"

namespace lmf::distributed {
namespace {

int EnvInt(const char* name, int fallback) {
  int value = fallback;
  const char* text = std::getenv(name);
  if (text != nullptr && !absl::SimpleAtoi(text, &value)) value = fallback;
  return value;
}

int Main() {
  absl::StatusOr<std::optional<LaunchedRank>> launched = LaunchedRankFromEnvironment();
  if (!launched.ok() || !launched->has_value()) {
    std::fprintf(stderr, "worker: no launcher variables: %s\n",
                 launched.ok() ? "RANK unset" : std::string(launched.status().message()).c_str());
    return 1;
  }
  const LaunchedRank& me = **launched;
  const int nproc = EnvInt("LAUNCH_TEST_NPROC", -1);
  if (me.world_size != EnvInt("LAUNCH_TEST_WORLD", -1) || me.local_world_size != nproc ||
      me.local_rank != me.rank % nproc) {
    std::fprintf(stderr, "worker: rank %d of %d, local %d of %d: not what the test launched\n", me.rank,
                 me.world_size, me.local_rank, me.local_world_size);
    return 1;
  }
  absl::StatusOr<std::unique_ptr<GlooGroup>> group =
      JoinLaunchedGroup(me, std::chrono::seconds(10), std::chrono::seconds(20));
  if (!group.ok()) {
    std::fprintf(stderr, "worker: %s\n", std::string(group.status().message()).c_str());
    return 1;
  }
  for (int i = 0; i < EnvInt("LAUNCH_TEST_LINES", 0); ++i) {
    std::printf("line %d of worker %d: ", i, me.rank);
    std::fflush(stdout);
    std::printf("%s\n", std::string(200, 'x').c_str());
    std::fflush(stdout);
  }
  const int fail_rank = EnvInt("LAUNCH_TEST_FAIL_RANK", -1);
  const std::string how = std::getenv("LAUNCH_TEST_FAIL_HOW") != nullptr ? std::getenv("LAUNCH_TEST_FAIL_HOW") : "";
  for (int step = 0; step < EnvInt("LAUNCH_TEST_STEPS", 3); ++step) {
    if (me.rank == fail_rank && step == 2) {
      if (how == "kill") ::raise(SIGKILL);
      std::fprintf(stderr, "worker %d: planted failure at step %d\n", me.rank, step);
      return 7;
    }
    float value = static_cast<float>(me.rank + 1);
    if (absl::Status s = (*group)->AllReduce(Buffer::Host(&value, 1), ReduceOp::kSum); !s.ok()) {
      std::fprintf(stderr, "worker %d: %s\n", me.rank, std::string(s.message()).c_str());
      return 1;
    }
    if (value != me.world_size * (me.world_size + 1) / 2.0f) {
      std::fprintf(stderr, "worker %d: all-reduce gave %g\n", me.rank, value);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("worker %d of %d: passed\n", me.rank, me.world_size);
  if (EnvInt("LAUNCH_TEST_LINES", 0) > 0) std::fprintf(stderr, "worker %d: last words", me.rank);
  return 0;
}

}  // namespace
}  // namespace lmf::distributed

int main() { return lmf::distributed::Main(); }
