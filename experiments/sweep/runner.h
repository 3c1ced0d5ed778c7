// Running a planned sweep: each run is a separate process (the training command, given the run's config
// file), at most `parallel_runs` at once, the longest first; a WSD branch (PlannedRun::trunk) starts
// once its trunk has written the checkpoint it starts from. A run whose folder already holds a finished
// result is skipped, so a killed sweep started again finishes only what is missing. A run that fails is
// recorded (status and the tail of its log) and the sweep goes on. At the end every run's numbers go into the
// results table (scaling/results.h), written atomically to <output_dir>/results.csv.
#ifndef LMFORGE_EXPERIMENTS_SWEEP_RUNNER_H_
#define LMFORGE_EXPERIMENTS_SWEEP_RUNNER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/file.h"
#include "experiments/sweep/plan.h"
#include "experiments/sweep/sweep.pb.h"
#include "scaling/results.h"

namespace lmf::sweep {

struct SweepSummary;

struct RunnerOptions {
  // The training command; the runner appends `--config=<run dir>/config.textproto` and runs it with the
  // run's folder as its working directory, stdout and stderr going to <run dir>/log.txt. The command must
  // write <run dir>/result.textproto (a SweepRunResult) before it exits.
  std::vector<std::string> command;
  // > 0: each training process gets LMF_NUM_THREADS=threads_per_run (unless the user's environment sets
  // it), so runs that train at once share the cores instead of oversubscribing them; the ranks of a
  // data-parallel run (run.parallel.data = P) get threads_per_run / P each.
  int threads_per_run = 0;
  // Progress lines ("[3/12] C1e15_d64_L2 finished: loss 3.41 (52 s)"); nullptr for none.
  std::function<void(const std::string&)> progress;
  // What the user starts again to continue after a stop signal, in RunSweep's Cancelled message: "the
  // sweep", or the program that runs it ("the quickstart").
  std::string restarted_by = "the sweep";
  // Called once results.csv is written, while the sweep still holds its folder's lock: the report, which
  // must describe that results.csv and not one that a second sweep started on the folder rewrote. Its error
  // is RunSweep's. nullptr for none.
  std::function<absl::Status(const SweepSummary&)> finish;
};

struct SweepSummary {
  int finished = 0, failed = 0, diverged = 0;
  int skipped = 0;  // finished earlier, not run again
  std::string results_path;
  scaling::ResultsTable table;
};

// Writes the plan into the sweep folder (plan.txt, each run's config.textproto), runs what is missing and
// writes results.csv. Errors only for what stops the whole sweep (cannot write the folder, cannot start a
// process); a run's failure is recorded instead.
absl::StatusOr<SweepSummary> RunSweep(const SweepPlan& plan, const RunnerOptions& options);

// What a start of a sweep trains, decided the same way for every executor (RunSweep's local processes, the
// Slurm executor's job array in slurm_executor.h): StartSweep takes the sweep folder's lock, writes plan.txt
// and each run's config.textproto and data.stamp, skips the finished runs whose config and data have not
// changed (their results kept), moves aside those that changed, and rewinds WSD trunks whose branches need
// a checkpoint they no longer have.
struct SweepStart {
  std::optional<FileLock> lock;                 // <output_dir>/.sweep.lock; hold it until FinishSweep returns
  std::vector<size_t> todo;                     // indices into plan.runs: the runs to train
  std::vector<config::SweepRunResult> results;  // one per run: a skipped run's result, else empty
  int skipped = 0;                              // finished earlier, not trained again
};
// `in_flight(i)`: run i is in an executor's queue already (a Slurm job pending or running): its folder is
// not touched and it is neither skipped nor in `todo`. nullptr: no run is. `progress` as RunnerOptions'.
absl::StatusOr<SweepStart> StartSweep(const SweepPlan& plan, const std::function<bool(size_t)>& in_flight,
                                      const std::function<void(const std::string&)>& progress);

// Writes <output_dir>/results.csv from every run's result (one per plan.runs; an empty one for a run that
// did not start), then calls options.finish.
absl::StatusOr<SweepSummary> FinishSweep(const SweepPlan& plan, std::vector<config::SweepRunResult> results,
                                         int skipped, const RunnerOptions& options);

// The result file of a run folder, if it has one.
absl::StatusOr<config::SweepRunResult> ReadRunResult(const std::string& run_dir);
absl::Status WriteRunResult(const std::string& run_dir, const config::SweepRunResult& result);

// Records in `result` (tokens, flops) what a run that ended early (diverged, failed, stopped) had trained:
// the tokens of the last step it completed, from the last line of its metrics.jsonl, or for a WSD branch
// with no step of its own yet the step of its trunk's checkpoint it starts from; 0 for a run that completed
// no step. FLOPs are those tokens times `flops_per_token`. The results table shows these, not the plan's.
void RecordTrainedSoFar(const std::string& run_dir, const config::Experiment& experiment,
                        double flops_per_token, config::SweepRunResult* result);

}  // namespace lmf::sweep

#endif  // LMFORGE_EXPERIMENTS_SWEEP_RUNNER_H_
