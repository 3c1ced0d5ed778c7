// Data parallelism on one machine (run.parallel.data = P > 1; run.proto ParallelConfig), and the same start
// for a pipeline-parallel run (P = data x pipeline ranks; the trainer builds their mesh). The process the
// user started is rank 0: Train starts ranks 1..P-1 as child processes (this executable again, or
// TrainOptions::data_parallel_command), each with the run's resolved config, and all P join a Gloo group
// over loopback TCP through a rendezvous folder in the run folder. Every rank builds the same model from
// the same seed (rank 0's weights are broadcast anyway) and draws the same data stream; rank r computes
// micro-batches [r A/P, (r+1) A/P) of each step's A = run.grad_accum_steps, the gradients and losses are
// summed over the ranks, and every rank applies the same update. Rank 0 alone evaluates, logs and writes
// checkpoints; rank r > 0 appends to <run>/rank_<r>.log (each start after a dated line: LogStartLine). The
// ranks share the cores: each, rank 0 included, runs LMF_NUM_THREADS threads if that is set, else the
// hardware thread count / P. A rank that dies fails the others' next collective; rank 0 then names it and
// its log's last lines. Stopping: SIGINT/SIGTERM (Ctrl-C reaches every rank) are agreed on at the step's
// all-reduce, so all ranks stop after the same step and rank 0 checkpoints. A CUDA run's ranks take a GPU
// each and also form an NCCL group through the rendezvous folder (device_group.h).
//
// Starting, watching and stopping the processes, the rendezvous folder and the thread count are
// distributed/'s (launcher.h, rendezvous.h); this file keeps what is the trainer's: what a worker is told
// (the run's config, --resume, its stop step, the group's timeout) and the worker's main.
//
// Any binary that calls Train must start with
//     if (lmf::experiments::IsDataParallelWorker()) return lmf::experiments::DataParallelWorkerMain();
// (train, sweep and quickstart do) so that it can serve as a worker.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_DATA_PARALLEL_H_
#define LMFORGE_EXPERIMENTS_TRAINER_DATA_PARALLEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/thread_pool.h"
#include "config/experiment.pb.h"
#include "distributed/collectives.h"
#include "distributed/launcher.h"
#include "distributed/rendezvous.h"

namespace lmf::experiments {

struct TrainOptions;

// The workers of a data-parallel run and the group, seen from rank 0.
class DataParallelLaunch {
 public:
  // Starts ranks 1..P-1 (`command`, or this executable when empty) and joins the group as rank 0.
  // `experiment` is resolved, with absolute paths; its run folder exists and is locked by this process.
  static absl::StatusOr<std::unique_ptr<DataParallelLaunch>> Start(const config::Experiment& experiment,
                                                                   const TrainOptions& options);
  DataParallelLaunch(const DataParallelLaunch&) = delete;
  DataParallelLaunch& operator=(const DataParallelLaunch&) = delete;
  // Stops (SIGTERM) and reaps workers still running, and removes the rendezvous folder.
  ~DataParallelLaunch();

  distributed::Collectives& group() { return *group_; }
  // The folder the ranks met in (a CUDA run's NCCL group meets there too).
  const std::string& rendezvous_dir() const { return rendezvous_->path(); }
  // The pool rank 0 trains on: the run's thread count, the same as every worker's (ThreadPool::Default() when
  // it has that many threads, else a pool of this launch's own).
  ThreadPool& pool() { return *pool_; }

  // Waits for every worker to exit; an error names each that failed, with its log's last lines.
  absl::Status Wait();
  // After a failed collective: which workers have died (waiting up to `grace_ms` for one to be seen), ""
  // when none has.
  std::string DeadWorkers(int grace_ms);

 private:
  DataParallelLaunch() = default;

  std::unique_ptr<distributed::RendezvousFolder> rendezvous_;
  std::unique_ptr<distributed::WorkerProcesses> workers_;
  std::unique_ptr<distributed::Collectives> group_;
  ThreadPool* pool_ = nullptr;
  std::unique_ptr<ThreadPool> own_pool_;  // when ThreadPool::Default() has another thread count
};

// Removes the rendezvous folders killed data-parallel launches left in a run folder. Only for the process
// that holds the run folder's lock (no live launch can be using them then).
absl::Status RemoveStaleRendezvous(const std::string& run_dir);

// Whether this process was started as a data-parallel worker (its environment says so).
bool IsDataParallelWorker();

// A worker's whole life: join the group, train as its rank, return the exit status (0: trained).
int DataParallelWorkerMain();

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_DATA_PARALLEL_H_
