// Running a sweep on a Slurm cluster (`sweep --executor=slurm`): the runs that StartSweep (runner.h) leaves
// to train are submitted as one job array, each task training one run folder with the sweep's one-run mode
// (train_run.h) under srun, as the local executor's processes do. Everything stays in the sweep folder on
// the shared file system: the batch script and the run list of each submission and the array tasks' output
// under <output_dir>/slurm/, the submitted task ids in <output_dir>/slurm/jobs.txt (rewritten atomically).
//
// Started again, a sweep submits only the runs that are neither finished nor in the queue (squeue), so it is
// as resumable as the local executor. A task stopped by SIGTERM (preemption, 2 minutes before its time limit:
// sbatch --signal=TERM@120, `scancel --signal=TERM`) finishes its step, checkpoints, and requeues itself (`scontrol requeue`); its next start
// resumes the run bit-identically. With `wait`, the executor follows the array (and the runs queued before)
// until none is in the queue, then writes results.csv as RunSweep does.
#ifndef LMFORGE_EXPERIMENTS_SWEEP_SLURM_EXECUTOR_H_
#define LMFORGE_EXPERIMENTS_SWEEP_SLURM_EXECUTOR_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "experiments/sweep/plan.h"
#include "experiments/sweep/runner.h"

namespace lmf::sweep {

struct SlurmOptions {
  // The training command, as RunnerOptions::command: a task runs it with `--config=<run dir>/config.textproto`
  // in the run's folder. It must be on a file system the compute nodes see.
  std::vector<std::string> command;
  std::string partition, account, time;  // sbatch's --partition, --account, --time; "": the cluster's
  int cpus_per_run = 1;                  // --cpus-per-task; the run trains on that many threads
  int gpus_per_run = 0;                  // --gpus (0: none)
  int max_concurrent = 0;                // the array's %N: at most N runs at once (0: as Slurm allows)
  bool wait = false;                     // follow the array until it ends, then write results.csv
  double poll_seconds = 10;              // with `wait`: how often squeue is asked
  double command_timeout_seconds = 60;   // each sbatch / squeue call
};

struct SlurmSubmission {
  std::string job_id;  // the array's job id; "" when nothing needed submitting
  int submitted = 0;   // runs in the array
  int queued = 0;      // runs left alone because a task of an earlier submission has them
  int skipped = 0;     // finished earlier
  std::optional<SweepSummary> summary;  // with `wait`: the results (results.csv written)
};

// Validates `slurm`, decides what to train (StartSweep, with the queued runs left alone), writes the batch
// script and submits the array (nothing when every run is finished or queued); with `slurm.wait` follows it
// and finishes the sweep (FinishSweep: results.csv, then options.finish). options.progress gets the lines.
// Errors: a Slurm command missing or refusing (its stderr quoted), a sweep with WSD branches (a branch
// starts from its trunk's checkpoint while the trunk trains: the local executor orders them).
absl::StatusOr<SlurmSubmission> SubmitSweepToSlurm(const SweepPlan& plan, const SlurmOptions& slurm,
                                                   const RunnerOptions& options);

}  // namespace lmf::sweep

#endif  // LMFORGE_EXPERIMENTS_SWEEP_SLURM_EXECUTOR_H_
