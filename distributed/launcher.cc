// WorkerProcesses and ThreadsPerRank (see launcher.h).
#include "distributed/launcher.h"

#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/subprocess.h"
#include "base/thread_pool.h"
#include "distributed/rendezvous.h"

namespace lmf::distributed {
namespace {

// The last `lines` lines of a file, for failure messages.
std::string Tail(const std::string& path, int lines) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return "";
  std::vector<std::string> all = absl::StrSplit(*text, '\n', absl::SkipWhitespace());
  if (static_cast<int>(all.size()) > lines) all.erase(all.begin(), all.end() - lines);
  return absl::StrJoin(all, " | ");
}

std::string Duration(std::chrono::milliseconds t) {
  return t.count() % 1000 == 0 ? absl::StrCat(t.count() / 1000, " s") : absl::StrCat(t.count(), " ms");
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerProcesses>> WorkerProcesses::Start(const LaunchOptions& options) {
  std::unique_ptr<WorkerProcesses> workers(new WorkerProcesses(options));
  const int end = options.rank_count > 0 ? options.first_rank + options.rank_count : options.world_size;
  if (options.prefix_output && options.log_dir.empty()) workers->output_ = std::make_unique<RankOutput>();
  for (int rank = options.first_rank; rank < end; ++rank) {
    ChildSpec child;
    if (workers->output_ != nullptr) {
      absl::StatusOr<RankOutput::WriteEnds> ends = workers->output_->AddRank(rank);
      if (!ends.ok()) return ends.status();
      child.stdout_fd = ends->out;
      child.stderr_fd = ends->err;
    }
    child.argv = options.command;
    if (options.environment) child.env = options.environment(rank);
    child.log_path = workers->LogPath(rank);
    if (options.log_header) child.log_header = options.log_header(rank);
    child.parent_death_signal = options.parent_death_signal;
    child.own_process_group = options.own_process_groups;
    child.working_dir = options.working_dir;
    absl::StatusOr<pid_t> pid = StartChild(child);
    if (!pid.ok()) return pid.status();  // the workers started so far are stopped with `workers`
    workers->workers_.push_back(Worker{rank, *pid, 0, false});
  }
  if (workers->output_ != nullptr) workers->output_->Start();
  return workers;
}

WorkerProcesses::~WorkerProcesses() { Stop(); }

std::string WorkerProcesses::LogPath(int rank) const {
  if (options_.log_dir.empty()) return "";
  return absl::StrCat(options_.log_dir, "/rank_", rank, ".log");
}

std::string WorkerProcesses::Describe(const Worker& worker) const {
  const int status = worker.wait_status;
  const std::string how = WIFEXITED(status) ? absl::StrCat("exited with status ", WEXITSTATUS(status))
                                            : absl::StrCat("was killed by signal ", WTERMSIG(status));
  const std::string log = LogPath(worker.rank);
  if (log.empty()) return absl::StrCat("rank ", worker.rank, " ", how, " (its output is above)");
  return absl::StrCat("rank ", worker.rank, " ", how, " (", log, ": ", Tail(log, 3), ")");
}

void WorkerProcesses::Reap() {
  for (Worker& worker : workers_) {
    if (worker.pid >= 0 && ::waitpid(worker.pid, &worker.wait_status, WNOHANG) == worker.pid) worker.pid = -1;
  }
}

absl::Status WorkerProcesses::WaitUntilReady(const std::string& folder, std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    Reap();  // before looking for the marks: a worker that exits after its mark is not named here
    bool all_ready = true;
    std::vector<std::string> dead;
    for (Worker& worker : workers_) {
      if (IsReady(folder, worker.rank)) continue;
      all_ready = false;
      if (worker.pid < 0 && !worker.named) {
        worker.named = true;
        dead.push_back(Describe(worker));
      }
    }
    if (!dead.empty()) return absl::UnavailableError(absl::StrJoin(dead, "; "));
    if (all_ready) return absl::OkStatus();
    if (std::chrono::steady_clock::now() - start >= timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("the workers did not start within ", Duration(timeout), " (see rank_<r>.log)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string WorkerProcesses::DeadWorkers(std::chrono::milliseconds grace) {
  std::vector<std::string> dead;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    Reap();
    for (Worker& worker : workers_) {
      if (worker.pid >= 0 || worker.named) continue;
      worker.named = true;
      dead.push_back(Describe(worker));
    }
    if (!dead.empty() || std::chrono::steady_clock::now() - start >= grace) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::StrJoin(dead, "; ");
}

absl::Status WorkerProcesses::Wait() {
  std::vector<std::string> failed;
  for (Worker& worker : workers_) {
    if (worker.pid >= 0) {
      while (::waitpid(worker.pid, &worker.wait_status, 0) < 0 && errno == EINTR) {
      }
      worker.pid = -1;
    }
    worker.named = true;  // accounted for here
    if (!WIFEXITED(worker.wait_status) || WEXITSTATUS(worker.wait_status) != 0)
      failed.push_back(Describe(worker));
  }
  if (output_ != nullptr) output_->Finish(RankOutput::kFinishGrace);  // the workers' last lines
  if (failed.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrJoin(failed, "; "));
}

void WorkerProcesses::Stop() {
  for (const Worker& worker : workers_) {
    if (worker.pid >= 0) ::kill(worker.pid, SIGTERM);
  }
  // A worker stopped mid-collective exits at once; one in a long step gets stop_grace, then SIGKILL.
  const auto start = std::chrono::steady_clock::now();
  bool killed = false;
  for (;;) {
    Reap();
    bool running = false;
    for (const Worker& worker : workers_) running = running || worker.pid >= 0;
    if (!running) break;
    if (!killed && std::chrono::steady_clock::now() - start >= options_.stop_grace) {
      for (const Worker& worker : workers_) {
        if (worker.pid >= 0) ::kill(worker.pid, SIGKILL);
      }
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (output_ != nullptr) output_->Finish(RankOutput::kFinishGrace);  // the workers' last lines
}

std::vector<WorkerProcesses::Exit> WorkerProcesses::Exited() {
  Reap();
  std::vector<Exit> exited;
  for (Worker& worker : workers_) {
    if (worker.pid >= 0 || worker.named) continue;
    worker.named = true;
    const int status = worker.wait_status;
    exited.push_back(Exit{worker.rank, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                          Describe(worker)});
  }
  return exited;
}

bool WorkerProcesses::AnyRunning() {
  Reap();
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.pid >= 0; });
}

void WorkerProcesses::Signal(int signal) {
  for (const Worker& worker : workers_) {
    if (worker.pid >= 0) ::kill(worker.pid, signal);
  }
}

int ThreadsPerRank(int world) {
  int threads = 0;
  if (const char* env = std::getenv("LMF_NUM_THREADS");
      env != nullptr && absl::SimpleAtoi(env, &threads) && threads > 0) {
    return std::min(threads, ThreadPool::kMaxThreads);
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world);
}

}  // namespace lmf::distributed
