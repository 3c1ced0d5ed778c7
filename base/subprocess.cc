// StartChild, LogStartLine and RunCommand (see subprocess.h).
#include "base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace lmf {

std::string LogStartLine(const std::string& what) {
  char when[64] = "";
  const std::time_t now = std::time(nullptr);
  std::tm local = {};
  ::localtime_r(&now, &local);
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &local);
  return absl::StrCat("==== ", when, ": ", what, "\n");
}

absl::StatusOr<pid_t> StartChild(const ChildSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty())
    return absl::InvalidArgumentError("StartChild: no executable");
  // Prepared here, in the parent: the child only points at them.
  std::vector<std::string> args = spec.argv, env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const auto& [name, value] : spec.env) replaced = replaced || entry.rfind(name + "=", 0) == 0;
    if (!replaced) env_strings.push_back(entry);
  }
  for (const auto& [name, value] : spec.env) env_strings.push_back(absl::StrCat(name, "=", value));
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string exec_failed = absl::StrCat("cannot execute ", spec.argv[0], "\n");
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork failed: ", std::strerror(errno)));
  if (pid > 0) return pid;
  // The child: async-signal-safe calls only.
  if (spec.parent_death_signal > 0) {
    ::prctl(PR_SET_PDEATHSIG, spec.parent_death_signal);
    if (::getppid() != parent) ::_exit(1);  // the parent died before the prctl
  }
  if (spec.own_process_group) ::setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  if (!spec.log_path.empty()) {
    const int fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      (void)!::write(STDERR_FILENO, spec.log_header.data(), spec.log_header.size());
    }
  } else {
    if (spec.stdout_fd >= 0) ::dup2(spec.stdout_fd, STDOUT_FILENO);
    if (spec.stderr_fd >= 0) ::dup2(spec.stderr_fd, STDERR_FILENO);
  }
  if (!spec.working_dir.empty() && ::chdir(spec.working_dir.c_str()) != 0) ::_exit(126);
  ::execve(argv[0], argv.data(), envp.data());
  (void)!::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
  ::_exit(127);
}

namespace {

// Reads what is ready on the pipes (stdout, stderr) until both ended or `deadline` passed; closes each pipe
// at its end and sets it to -1 (the caller closes those still open).
bool DrainPipes(int pipes[2], std::chrono::steady_clock::time_point deadline, CommandOutput* output) {
  struct pollfd fds[2] = {{pipes[0], POLLIN, 0}, {pipes[1], POLLIN, 0}};
  std::string* sinks[2] = {&output->out, &output->err};
  int open_pipes = 2;
  while (open_pipes > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                          std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    const int ready = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) return false;
    for (int i = 0; i < 2 && ready > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = pipes[i] = -1;
        --open_pipes;
      }
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<CommandOutput> RunCommand(const std::vector<std::string>& argv, double timeout_seconds) {
  if (argv.empty() || argv[0].empty()) return absl::InvalidArgumentError("RunCommand: no command");
  const std::string what = absl::StrJoin(argv, " ");
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  // The command starts with no signal blocked and SIGINT / SIGTERM at their default, whatever this process has.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> args = argv;
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) arg_ptrs.push_back(a.data());
  arg_ptrs.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, argv[0].c_str(), &actions, &attr, arg_ptrs.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (spawned != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return absl::NotFoundError(absl::StrCat("cannot run ", argv[0], ": ", std::strerror(spawned)));
  }
  CommandOutput output;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  int pipes[2] = {out_pipe[0], err_pipe[0]};
  const bool ended = DrainPipes(pipes, deadline, &output);
  for (const int fd : pipes) {
    if (fd >= 0) ::close(fd);
  }
  if (!ended) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!ended) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, ": no answer within ", timeout_seconds, " s (killed)"));
  }
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return output;
}

}  // namespace lmf
