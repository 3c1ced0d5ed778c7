// Starting a child process from a parent that may run threads (the kernels' pool, Gloo's): everything the
// child needs (arguments, environment, log file, folder) is prepared before fork, and between fork and exec
// the child calls only async-signal-safe functions, so no lock another thread held at the fork can hang it.
#ifndef LMFORGE_BASE_SUBPROCESS_H_
#define LMFORGE_BASE_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lmf {

struct ChildSpec {
  std::vector<std::string> argv;  // argv[0] is the executable's path
  // Environment variables to set in the child (replacing the parent's value); the rest is inherited.
  std::vector<std::pair<std::string, std::string>> env;
  std::string log_path;            // stdout and stderr, appended to ("": inherited)
  // Without a log_path: the parent's descriptors the child's stdout and stderr are (the write ends of
  // pipes the parent reads); -1: inherited.
  int stdout_fd = -1;
  int stderr_fd = -1;
  std::string log_header;          // written to the log first (LogStartLine: when and what starts)
  std::string working_dir;         // "": the parent's
  bool own_process_group = false;  // a terminal's Ctrl-C then reaches only the parent, which forwards it
  // > 0: the signal the child gets when the parent dies (Linux PR_SET_PDEATHSIG), e.g. SIGKILL, or SIGTERM
  // for a child that stops cleanly on it.
  int parent_death_signal = 0;
};

// Starts the child; returns its pid. The child starts with no signal blocked and SIGINT / SIGTERM at their
// default action, whatever the parent had. If exec fails, the child writes why to its log and exits with 127
// (126: cannot enter working_dir). argv[0] may be "/proc/self/exe": the parent's own executable, even if the
// file has been replaced or deleted since it started.
absl::StatusOr<pid_t> StartChild(const ChildSpec& spec);

// A separator for a log that every start of a process appends to: "==== 2026-12-04 21:44:47: <what>\n"
// (local time), so that a restart's lines are told from the earlier attempt's above them.
std::string LogStartLine(const std::string& what);

// What RunCommand's command printed and how it ended.
struct CommandOutput {
  int exit_code = 0;  // the exit status; 128 + N for a command ended by signal N
  std::string out, err;
};

// Runs argv (argv[0] looked up on PATH as a shell would) with no input, captures its stdout and stderr, and
// waits for it at most `timeout_seconds`: past that it is killed and the error is DeadlineExceeded naming
// the command. NotFound when argv[0] is not on PATH or cannot be executed. A command that ran returns its
// output whatever its exit code. For short tools (a scheduler's sbatch, squeue), not for long runs.
absl::StatusOr<CommandOutput> RunCommand(const std::vector<std::string>& argv, double timeout_seconds);

}  // namespace lmf

#endif  // LMFORGE_BASE_SUBPROCESS_H_
