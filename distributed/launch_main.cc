// `launch`: starts one machine's ranks of a multi-process program with torchrun's conventions.
//
//   ./bazelw run //distributed:launch -- --nproc_per_node=N [--nnodes=M --node_rank=K --rdzv=HOST:PORT]
//       [--log_dir=DIR | --prefix_output=false] -- BINARY ARGS...
//
// Each of the N workers runs BINARY ARGS in the caller's working folder with RANK (K N + local rank),
// WORLD_SIZE (M N), LOCAL_RANK, LOCAL_WORLD_SIZE (N), MASTER_ADDR and MASTER_PORT (HOST and PORT; on one
// machine without --rdzv, 127.0.0.1 and a free port) set; rank 0 serves the TCP store the ranks meet through
// there (launched_rank.h). On several machines, run the same command on each with its --node_rank.
// Workers print to this process's stdout and stderr, each line prefixed "[rank R] " (whole lines, never mixed
// with another rank's; --prefix_output=false: as they write it), or to DIR/rank_<r>.log with --log_dir.
//
// The first worker that fails (exits with a non-zero status or is killed) is named, with its status (and
// its log's last lines with --log_dir); the others get SIGTERM (SIGKILL --stop_timeout_s later) and this
// process exits with that worker's status (128 + N for signal N). SIGINT or SIGTERM to this process (Ctrl-C)
// goes to every worker (each runs in a process group of its own, so a terminal's Ctrl-C reaches them once,
// through here); the trainer then checkpoints and exits 4, and so does this process. A second signal is
// forwarded too (the trainer then ends at once); workers still running --stop_timeout_s after the first are
// killed.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/flags.h"
#include "distributed/launched_rank.h"
#include "distributed/launcher.h"

ABSL_FLAG(int, nproc_per_node, 0, "the workers to start on this machine (required)");
ABSL_FLAG(int, nnodes, 1, "the machines the run spans; each runs this command with its --node_rank");
ABSL_FLAG(int, node_rank, 0, "this machine's place among the --nnodes, from 0; its ranks are node_rank * nproc_per_node on");
ABSL_FLAG(std::string, rdzv, "",
          "HOST:PORT where rank 0 (on node 0) serves the store the ranks meet through (MASTER_ADDR, MASTER_PORT); "
          "required with --nnodes > 1; default on one machine: 127.0.0.1 and a free port");
ABSL_FLAG(std::string, log_dir, "", "write rank r's output to DIR/rank_<r>.log instead of this process's");
ABSL_FLAG(bool, prefix_output, true,
          "prefix each line the workers print with \"[rank R] \" (as torchrun's --tee with its line prefix); "
          "--prefix_output=false passes their output through as it is; no effect with --log_dir");
ABSL_FLAG(int, stop_timeout_s, 300,
          "seconds the workers get to exit after a stop (a signal, or another worker failing) before SIGKILL");

namespace lmf::distributed {
namespace {

constexpr char kUsage[] =
    "Starts one machine's ranks of a multi-process program, with torchrun's variables (RANK, WORLD_SIZE,\n"
    "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT).\n"
    "usage: launch --nproc_per_node=N [--nnodes=M --node_rank=K --rdzv=HOST:PORT] [--log_dir=DIR | "
    "--prefix_output=false] -- BINARY ARGS...\n"
    "Exit status: the first failed worker's (128 + N for signal N), else 0; 2 usage; 1 the workers could not start.";

// The executable: a path with a '/' taken from the caller's folder, else looked up in PATH as a shell does.
absl::StatusOr<std::string> FindExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) return UserPath(name);
  const char* path = std::getenv("PATH");
  for (const absl::string_view dir : absl::StrSplit(path != nullptr ? path : "", ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("the command \"", name, "\" is not in PATH"));
}

// Where rank 0 serves the store: --rdzv, else (one machine) loopback and a free port.
absl::StatusOr<std::pair<std::string, int>> Rendezvous(int nnodes) {
  const std::string rdzv = absl::GetFlag(FLAGS_rdzv);
  if (rdzv.empty()) {
    if (nnodes > 1) return absl::InvalidArgumentError("--nnodes > 1 needs --rdzv=HOST:PORT (node 0's address)");
    absl::StatusOr<int> port = FreeLoopbackPort();
    if (!port.ok()) return port.status();
    return std::make_pair(std::string("127.0.0.1"), *port);
  }
  const size_t colon = rdzv.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(rdzv.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--rdzv=", rdzv, ": expected HOST:PORT with a port from 1 to 65535"));
  }
  return std::make_pair(rdzv.substr(0, colon), port);
}

// Watches the workers until all have exited; returns this process's exit status.
int Supervise(WorkerProcesses& workers, const sigset_t& stop_signals) {
  const auto stop_timeout = std::chrono::seconds(absl::GetFlag(FLAGS_stop_timeout_s));
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  std::optional<WorkerProcesses::Exit> failed;  // the first worker that failed
  int stopped_by = 0;                           // the first signal forwarded
  bool killed = false;
  const auto stop = [&] {
    if (!kill_at.has_value()) kill_at = std::chrono::steady_clock::now() + stop_timeout;
  };
  for (;;) {
    const timespec poll = {0, 100 * 1000 * 1000};
    if (const int signal = ::sigtimedwait(&stop_signals, nullptr, &poll); signal > 0) {
      std::fprintf(stderr, "launch: got %s: passing it to every worker\n", ::strsignal(signal));
      workers.Signal(signal);
      if (stopped_by == 0) stopped_by = signal;
      stop();
    }
    for (const WorkerProcesses::Exit& exit : workers.Exited()) {
      if (exit.exit_code == 0 || failed.has_value()) continue;
      failed = exit;
      if (stopped_by != 0) continue;  // every worker was asked to stop: a non-zero status is how they do
      std::fprintf(stderr, "launch: %s; stopping the other workers\n", exit.description.c_str());
      workers.Signal(SIGTERM);
      stop();
    }
    if (!workers.AnyRunning()) break;
    if (!killed && kill_at.has_value() && std::chrono::steady_clock::now() >= *kill_at) {
      std::fprintf(stderr, "launch: workers still running %d s after the stop: killing them\n",
                   absl::GetFlag(FLAGS_stop_timeout_s));
      workers.Signal(SIGKILL);
      killed = true;
    }
  }
  if (!failed.has_value()) return 0;
  if (stopped_by != 0) {
    std::fprintf(stderr, "launch: stopped by %s; %s\n", ::strsignal(stopped_by), failed->description.c_str());
  }
  return failed->exit_code;
}

int Main(int argc, char** argv) {
  // The flags end at the first "--"; the command follows.
  int separator = 1;
  while (separator < argc && std::strcmp(argv[separator], "--") != 0) ++separator;
  absl::SetProgramUsageMessage(kUsage);
  FlagsOptions flags;
  flags.usage_exit_code = 2;
  flags.checks = {AtLeast(FLAGS_nproc_per_node, 1), AtLeast(FLAGS_nnodes, 1), AtLeast(FLAGS_node_rank, 0),
                  AtLeast(FLAGS_stop_timeout_s, 1)};
  ParseFlags(separator, argv, flags);
  if (!FlagGiven(FLAGS_nproc_per_node)) {
    PrintUsageError("--nproc_per_node=N (the workers on this machine) is required");
    return 2;
  }
  if (separator + 1 >= argc) {
    PrintUsageError("no command: give it after \"--\": launch --nproc_per_node=N -- BINARY ARGS...");
    return 2;
  }
  const int nproc = absl::GetFlag(FLAGS_nproc_per_node), nnodes = absl::GetFlag(FLAGS_nnodes);
  const int node_rank = absl::GetFlag(FLAGS_node_rank);
  if (node_rank >= nnodes) {
    PrintUsageError(absl::StrCat("--node_rank=", node_rank, ": expected less than --nnodes=", nnodes));
    return 2;
  }
  absl::StatusOr<std::pair<std::string, int>> rendezvous = Rendezvous(nnodes);
  absl::StatusOr<std::string> executable = FindExecutable(argv[separator + 1]);
  if (!rendezvous.ok() || !executable.ok()) {
    PrintUsageError((!rendezvous.ok() ? rendezvous.status() : executable.status()).message());
    return 2;
  }
  LaunchOptions options;
  options.command.assign(argv + separator + 1, argv + argc);
  options.command[0] = *executable;
  options.world_size = nnodes * nproc;
  options.first_rank = node_rank * nproc;
  options.rank_count = nproc;
  options.log_dir = UserPath(absl::GetFlag(FLAGS_log_dir));
  options.prefix_output = absl::GetFlag(FLAGS_prefix_output);
  options.working_dir = UserWorkingDirectory();  // `bazel run` starts this in its runfiles
  options.own_process_groups = true;
  options.environment = [&](int rank) {
    LaunchedRank launched{rank, nnodes * nproc, rank - node_rank * nproc, nproc, rendezvous->first,
                          rendezvous->second, ""};
    return LaunchedRankEnvironment(launched);
  };
  if (!options.log_dir.empty()) {
    if (absl::Status s = MakeDirs(options.log_dir); !s.ok()) {
      std::fprintf(stderr, "launch: --log_dir: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  // Taken by Supervise alone: blocked before the workers start (they start with them unblocked).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  absl::StatusOr<std::unique_ptr<WorkerProcesses>> workers = WorkerProcesses::Start(options);
  if (!workers.ok()) {
    std::fprintf(stderr, "launch: %s\n", std::string(workers.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "launch: ranks %d..%d of %d started; they meet at %s:%d\n", options.first_rank,
               options.first_rank + nproc - 1, options.world_size, rendezvous->first.c_str(), rendezvous->second);
  return Supervise(**workers, stop_signals);
}

}  // namespace
}  // namespace lmf::distributed

int main(int argc, char** argv) { return lmf::distributed::Main(argc, argv); }
