// Starting the worker processes of a multi-process program on this machine, and watching them: every worker
// runs the same command with its rank in its environment and logs to its own file; one that exits early is
// named at once (its rank, exit status or signal, and its log's last lines) instead of after some timeout;
// they are stopped (SIGTERM, then SIGKILL) and reaped when the launcher goes, and die with the launching
// process if it is killed. Data-parallel training (experiments/trainer/data_parallel.h) starts ranks 1..P-1
// with it, the launching process being rank 0.
#ifndef LMFORGE_DISTRIBUTED_LAUNCHER_H_
#define LMFORGE_DISTRIBUTED_LAUNCHER_H_

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distributed/rank_output.h"

namespace lmf::distributed {

struct LaunchOptions {
  std::vector<std::string> command;  // every worker's argv; "/proc/self/exe" runs this very executable
  int world_size = 1;
  int first_rank = 1;   // ranks first_rank..world_size-1 are started (1: this process is rank 0)
  int rank_count = 0;   // > 0: only ranks first_rank..first_rank+rank_count-1 (one machine's of a larger world)
  // Rank r's stdout and stderr are appended to <log_dir>/rank_<r>.log; "": they are this process's.
  std::string log_dir;
  // Without a log_dir: each line of rank r's stdout and stderr reaches this process's prefixed "[rank r] "
  // (rank_output.h), forwarded until the workers are stopped or waited for.
  bool prefix_output = false;
  std::string working_dir;          // "": this process's
  bool own_process_groups = false;  // each worker in a process group of its own (a terminal's Ctrl-C then
                                    // reaches the launcher alone, which forwards it)
  // The variables rank r gets on top of this process's environment (replacing those of the same name).
  std::function<std::vector<std::pair<std::string, std::string>>(int rank)> environment;
  // Written into rank r's log first (LogStartLine, base/subprocess.h); unset: nothing.
  std::function<std::string(int rank)> log_header;
  int parent_death_signal = SIGKILL;           // what a worker gets if the launching process dies
  std::chrono::milliseconds stop_grace{5000};  // from SIGTERM to SIGKILL when stopping
};

class WorkerProcesses {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerProcesses>> Start(const LaunchOptions& options);
  WorkerProcesses(const WorkerProcesses&) = delete;
  WorkerProcesses& operator=(const WorkerProcesses&) = delete;
  // Stop().
  ~WorkerProcesses();

  // Waits until every worker has said it is up in `folder` (MarkReady, rendezvous.h). A worker that exits
  // before it did ends the wait at once: Unavailable, naming it (as DeadWorkers does; one that exits after
  // saying it is up is left to DeadWorkers). DeadlineExceeded after `timeout`: "the workers did not start
  // within 60 s (see rank_<r>.log)".
  absl::Status WaitUntilReady(const std::string& folder, std::chrono::milliseconds timeout);

  // The workers that have exited and were not named yet, "; "-joined, each as "rank 2 exited with status 3
  // (<log>: <its last 3 lines, | between>)" or "rank 2 was killed by signal 9 (...)"; waits up to `grace`
  // for one to exit. "" when none has. Without a log_dir: "(its output is above)" instead of the lines.
  std::string DeadWorkers(std::chrono::milliseconds grace);

  // Waits for every worker to exit (for workers that end by themselves: no timeout); an error (Internal)
  // names each that failed, "; "-joined, as DeadWorkers does. DeadWorkers names none of them after it.
  absl::Status Wait();

  // SIGTERM to the workers still running, SIGKILL to those still running stop_grace later; reaps all (and
  // forwards their last lines, with prefix_output; Wait does too).
  void Stop();

  struct Exit {
    int rank;
    int exit_code;            // the exit status, or 128 + N for a worker ended by signal N (as a shell says)
    std::string description;  // as DeadWorkers names it
  };
  // The workers that have exited and were not named yet, in rank order; waits for none.
  std::vector<Exit> Exited();
  bool AnyRunning();
  // Sends `signal` to the workers still running.
  void Signal(int signal);

  // <log_dir>/rank_<r>.log; "" without a log_dir.
  std::string LogPath(int rank) const;

 private:
  struct Worker {
    int rank;
    pid_t pid;        // -1 once reaped
    int wait_status;  // once reaped
    bool named;       // in an error already
  };

  explicit WorkerProcesses(const LaunchOptions& options) : options_(options) {}
  // Reaps the workers that have exited.
  void Reap();
  std::string Describe(const Worker& worker) const;

  LaunchOptions options_;
  std::vector<Worker> workers_;
  std::unique_ptr<RankOutput> output_;  // with prefix_output
};

// The threads each of `world` processes on this machine runs: LMF_NUM_THREADS when it is a thread count (at
// most ThreadPool::kMaxThreads, as ThreadPool::Default reads it), else an even share (at least 1) of the
// hardware threads.
int ThreadsPerRank(int world);

}  // namespace lmf::distributed

#endif  // LMFORGE_DISTRIBUTED_LAUNCHER_H_
