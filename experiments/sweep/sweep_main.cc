// `./bazelw run //experiments:sweep -- --sweep=FILE`: expands a sweep (grid or IsoFLOP design), prints the
// plan, trains every run that is not finished yet, and writes <output_dir>/results.csv and the report. Run
// it again after a kill or a failure: finished runs are skipped.
//
//   --dry_run             print the plan and stop
//   --executor=local      each run in its own process here, `parallel_runs` at once (the default)
//   --parallel_runs=N     override the sweep file's parallel_runs
//   --executor=slurm      submit the runs to Slurm as one job array (slurm_executor.h); with --wait, follow it
//                         and write the results; --partition --account --time --cpus_per_run --gpus_per_run
//                         --max_concurrent are sbatch's
// Internal: `--train_one --config=RUN_CONFIG` is how the sweep starts each run's process (exit status 4:
// stopped by a signal after a checkpoint, as the trainer's).
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/flags.h"
#include "config/loader.h"
#include "experiments/sweep/data_check.h"
#include "experiments/sweep/plan.h"
#include "experiments/sweep/runner.h"
#include "experiments/sweep/slurm_executor.h"
#include "experiments/sweep/sweep_report.h"
#include "experiments/sweep/train_run.h"
#include "experiments/trainer/data_parallel.h"
#include "scaling/reporting/report.h"

ABSL_FLAG(std::string, sweep, "", "the sweep textproto (experiments/sweep/sweep.proto)");
ABSL_FLAG(bool, dry_run, false, "print the plan and stop");
ABSL_FLAG(int, parallel_runs, 0, "training processes at once (0: the sweep file's parallel_runs)");
ABSL_FLAG(std::string, executor, "local",
          "local: train the runs here, parallel_runs at once; slurm: submit them to Slurm as one job array");
ABSL_FLAG(std::string, partition, "", "slurm: the partition (sbatch --partition; default: the cluster's)");
ABSL_FLAG(std::string, account, "", "slurm: the account (sbatch --account)");
ABSL_FLAG(std::string, time, "", "slurm: each run's time limit (sbatch --time, e.g. 4:00:00)");
ABSL_FLAG(int, cpus_per_run, 1, "slurm: CPUs per run (sbatch --cpus-per-task; the run's training threads)");
ABSL_FLAG(int, gpus_per_run, 0, "slurm: GPUs per run (sbatch --gpus)");
ABSL_FLAG(int, max_concurrent, 0, "slurm: at most this many runs at once (the array's %N; 0: no limit)");
ABSL_FLAG(bool, wait, false, "slurm: follow the job array until it ends, then write results.csv and the report");
ABSL_FLAG(double, poll_seconds, 10, "slurm with --wait: seconds between two looks at the queue (squeue)");
ABSL_FLAG(bool, train_one, false, "internal: train the single run given by --config");
ABSL_FLAG(std::string, config, "", "internal: the run config for --train_one");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "sweep: %s\n", std::string(status.message()).c_str());
  return 1;
}

std::string SelfExecutable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

// The training data for the report's header: the file, or the mixture's files with their weights.
std::string DataNote(const lmf::config::DataConfig& data) {
  if (data.train_mixture_size() == 0) return data.train_tokens();
  std::vector<std::string> parts;
  for (const lmf::config::TokenSource& source : data.train_mixture())
    parts.push_back(absl::StrCat(source.path(), " x", source.weight()));
  return absl::StrCat("mixture of ", absl::StrJoin(parts, ", "));
}

// The results line and the report, written while the sweep still holds its folder's lock (the local and
// the Slurm executor's RunnerOptions::finish).
absl::Status ReportResults(const lmf::sweep::SweepPlan& plan, const std::string& sweep_path,
                           const lmf::sweep::SweepSummary& summary) {
  std::printf("sweep %s: %d finished (%d earlier), %d failed, %d diverged; results: %s\n", plan.name.c_str(),
              summary.finished, summary.skipped, summary.failed, summary.diverged, summary.results_path.c_str());
  const std::string report_dir = plan.output_dir + "/report";
  if (summary.finished > 0) {
    auto analysis = lmf::sweep::WriteSweepReport(
        plan, summary.results_path,
        absl::StrCat("Sweep ", sweep_path, " (data: ", DataNote(plan.base.data()), ")"), lmf::sweep::SizeOfModel);
    if (!analysis.ok()) return analysis.status();
    std::printf("report: %s/report.md\n", report_dir.c_str());
  } else {
    // An earlier report describes runs this sweep no longer has as finished.
    const bool had_report = lmf::FileExists(report_dir + "/report.md");
    if (absl::Status s = lmf::scaling::RemoveReport(report_dir); !s.ok()) return s;
    std::printf("report: none, no run has finished%s\n",
                had_report ? absl::StrCat(" (removed the earlier one in ", report_dir, ")").c_str() : "");
  }
  return absl::OkStatus();
}

// --dry_run: the plan is printed; says how many of its runs a start would skip.
void SayFinishedRuns(const lmf::sweep::SweepPlan& plan) {
  // The plan's time is the whole design's; a sweep started before has runs that a start skips.
  int finished = 0;
  for (const lmf::sweep::PlannedRun& run : plan.runs) {
    auto result = lmf::sweep::ReadRunResult(plan.output_dir + "/runs/" + run.name);
    finished += result.ok() && result->status() == lmf::config::SweepRunResult::FINISHED;
  }
  if (finished > 0) {
    std::printf("already finished: %d of %zu runs (a start skips those whose config and data have not "
                "changed since; the time above is the whole design's)\n",
                finished, plan.runs.size());
  }
}

// The Slurm flags, checked; an error when one is given with the local executor.
absl::StatusOr<lmf::sweep::SlurmOptions> SlurmFlags(bool slurm) {
  lmf::sweep::SlurmOptions options;
  options.partition = absl::GetFlag(FLAGS_partition);
  options.account = absl::GetFlag(FLAGS_account);
  options.time = absl::GetFlag(FLAGS_time);
  options.cpus_per_run = absl::GetFlag(FLAGS_cpus_per_run);
  options.gpus_per_run = absl::GetFlag(FLAGS_gpus_per_run);
  options.max_concurrent = absl::GetFlag(FLAGS_max_concurrent);
  options.wait = absl::GetFlag(FLAGS_wait);
  options.poll_seconds = absl::GetFlag(FLAGS_poll_seconds);
  if (slurm) {
    if (!(options.poll_seconds > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--poll_seconds=", options.poll_seconds, ": expected a number of seconds above 0"));
    }
    if (absl::GetFlag(FLAGS_parallel_runs) != 0) {
      return absl::InvalidArgumentError(
          "--parallel_runs is the local executor's; with --executor=slurm, --max_concurrent limits the runs at once");
    }
    return options;
  }
  const lmf::sweep::SlurmOptions defaults;
  const std::vector<std::pair<const char*, bool>> given = {
      {"--partition", !options.partition.empty()},
      {"--account", !options.account.empty()},
      {"--time", !options.time.empty()},
      {"--cpus_per_run", options.cpus_per_run != defaults.cpus_per_run},
      {"--gpus_per_run", options.gpus_per_run != defaults.gpus_per_run},
      {"--max_concurrent", options.max_concurrent != defaults.max_concurrent},
      {"--wait", options.wait},
      {"--poll_seconds", options.poll_seconds != defaults.poll_seconds}};
  for (const auto& [flag, set] : given) {
    if (set) return absl::InvalidArgumentError(absl::StrCat(flag, " is for --executor=slurm only"));
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  // A data-parallel run's other ranks are this binary again (experiments/trainer/data_parallel.h).
  if (lmf::experiments::IsDataParallelWorker()) return lmf::experiments::DataParallelWorkerMain();
  absl::SetProgramUsageMessage("Plans and runs a sweep of training runs, then writes its results table.");
  lmf::ParseFlags(argc, argv);
  if (absl::GetFlag(FLAGS_train_one)) {
    const absl::Status s = lmf::sweep::TrainSweepRun(absl::GetFlag(FLAGS_config));
    if (absl::IsCancelled(s)) {  // stopped by a signal, after a checkpoint: the trainer's status 4
      Fail(s);
      return 4;
    }
    return s.ok() ? 0 : Fail(s);
  }
  const std::string sweep_flag = absl::GetFlag(FLAGS_sweep);
  if (sweep_flag.empty()) return Fail(absl::InvalidArgumentError("--sweep is required (a sweep textproto)"));
  const std::string executor = absl::GetFlag(FLAGS_executor);
  if (executor != "local" && executor != "slurm") {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--executor=", executor, ": expected local or slurm")));
  }
  auto slurm = SlurmFlags(executor == "slurm");
  if (!slurm.ok()) return Fail(slurm.status());
  const std::string cwd = lmf::UserWorkingDirectory();
  const std::string path = lmf::UserPath(sweep_flag);
  auto sweep = lmf::sweep::LoadSweep(path);
  if (!sweep.ok()) return Fail(sweep.status());
  if (absl::GetFlag(FLAGS_parallel_runs) < 0) {
    return Fail(
        absl::InvalidArgumentError(absl::StrCat("--parallel_runs=", absl::GetFlag(FLAGS_parallel_runs),
                                                ": expected 1 or more (0: the sweep file's)")));
  }
  if (absl::GetFlag(FLAGS_parallel_runs) > 0) sweep->set_parallel_runs(absl::GetFlag(FLAGS_parallel_runs));
  auto plan = lmf::sweep::PlanSweep(*sweep, path, cwd, lmf::sweep::SizeOfModel);
  if (!plan.ok()) return Fail(plan.status());
  std::fputs(lmf::sweep::FormatPlan(*plan).c_str(), stdout);
  if (absl::GetFlag(FLAGS_dry_run)) {
    SayFinishedRuns(*plan);
    return 0;
  }
  if (absl::Status s = lmf::sweep::CheckRunsCanReadTheirData(*plan); !s.ok()) return Fail(s);

  lmf::sweep::RunnerOptions options;
  // Share the cores between the runs that train at once (LMF_NUM_THREADS, if set, wins).
  options.threads_per_run =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / plan->parallel_runs);
  options.command = {SelfExecutable(), "--train_one"};
  options.progress = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  options.finish = [&](const lmf::sweep::SweepSummary& summary) { return ReportResults(*plan, path, summary); };
  if (executor == "slurm") {
    slurm->command = options.command;
    auto submission = lmf::sweep::SubmitSweepToSlurm(*plan, *slurm, options);
    if (!submission.ok()) return Fail(submission.status());
    if (!submission->summary.has_value()) {
      if (!submission->job_id.empty()) {
        std::printf("follow it with: squeue -j %s; or run this command again with --wait, which submits "
                    "nothing more and writes results.csv once the array has ended\n",
                    submission->job_id.c_str());
      }
      return 0;
    }
    return submission->summary->failed + submission->summary->diverged > 0 ? 3 : 0;
  }
  auto summary = lmf::sweep::RunSweep(*plan, options);
  if (!summary.ok()) return Fail(summary.status());
  return summary->failed + summary->diverged > 0 ? 3 : 0;
}
