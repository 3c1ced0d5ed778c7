// Multi-process tests of process groups: RunRanks forks one process per rank; each joins a Gloo group over
// loopback through a fresh rendezvous folder and runs the test's body, which checks its own results (Checks)
// and reports through its exit code. Every wait has a deadline (ranks still running then are killed), so no
// test hangs; each rank's stderr is kept for the failure message.
#ifndef LMFORGE_DISTRIBUTED_TEST_RANKS_H_
#define LMFORGE_DISTRIBUTED_TEST_RANKS_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "distributed/collectives.h"

namespace lmf::distributed::testing {

struct RankOutcome {
  int exit_code = -1;  // the body's return value; -1 when killed
  int signal = 0;      // the signal that killed it, if one did
  bool killed_at_deadline = false;
  std::string log;  // its stderr
};

struct RankOptions {
  std::chrono::milliseconds timeout{20000};  // the group's op timeout
  std::chrono::seconds deadline{60};         // for the whole run; ranks still running then are killed
};

// Runs body(group) in `world` processes, the group's rank r in the r-th; each rank's outcome, in rank order.
// A rank that cannot connect exits with kConnectFailed.
constexpr int kConnectFailed = 100;
std::vector<RankOutcome> RunRanks(int world, const std::function<int(Collectives& group)>& body,
                                  const RankOptions& options = {});

// Each rank's exit code is as expected (every other code or a kill fails the test, with every rank's log).
void ExpectExitCodes(const std::vector<RankOutcome>& outcomes, const std::vector<int>& expected);
// Every rank exited 0.
void ExpectAllPassed(const std::vector<RankOutcome>& outcomes);
// For a binary that runs ranks (the benchmarks): 0 when every rank exited 0; else 1, after printing each
// failed rank's exit code, signal and log on stderr.
int ExitCodeOf(const std::vector<RankOutcome>& outcomes);

// A rank's checks: each failure is printed to its stderr; exit_code() is 0 when all passed, else 1.
// Thread-safe.
class Checks {
 public:
  explicit Checks(int rank) : rank_(rank) {}
  bool Expect(bool ok, const std::string& what);
  bool Ok(const absl::Status& status, const std::string& what);
  // `status` failed and its message contains every one of `parts`.
  bool FailsWith(const absl::Status& status, const std::vector<std::string>& parts, const std::string& what);
  int exit_code() const { return failures_ == 0 ? 0 : 1; }

 private:
  int rank_;
  std::atomic<int> failures_{0};
};

}  // namespace lmf::distributed::testing

#endif  // LMFORGE_DISTRIBUTED_TEST_RANKS_H_
