// StartChild and LogStartLine (see subprocess.h).
#include "base/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"

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
  }
  if (!spec.working_dir.empty() && ::chdir(spec.working_dir.c_str()) != 0) ::_exit(126);
  ::execve(argv[0], argv.data(), envp.data());
  (void)!::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
  ::_exit(127);
}

}  // namespace lmf
