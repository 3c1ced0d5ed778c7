// The Slurm executor (see slurm_executor.h): sbatch, squeue and the files it keeps in <output_dir>/slurm/.
#include "experiments/sweep/slurm_executor.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/subprocess.h"
#include "config/parallel_layout.h"

namespace lmf::sweep {
namespace {

// squeue may fail now and then (a controller restarting); the wait gives up after this many in a row.
constexpr int kSqueueFailuresInARow = 10;

std::string SlurmDir(const SweepPlan& plan) { return plan.output_dir + "/slurm"; }
std::string JobsPath(const SweepPlan& plan) { return SlurmDir(plan) + "/jobs.txt"; }
std::string RunDir(const SweepPlan& plan, const PlannedRun& run) {
  return std::filesystem::absolute(absl::StrCat(plan.output_dir, "/runs/", run.name)).string();
}

// A word for bash, in single quotes.
std::string ShellQuote(const std::string& word) {
  return absl::StrCat("'", absl::StrReplaceAll(word, {{"'", "'\\''"}}), "'");
}

// Runs a Slurm command; its refusal is an error quoting its stderr, its absence one saying where to run.
absl::StatusOr<CommandOutput> RunSlurmCommand(const std::vector<std::string>& argv, double timeout_seconds) {
  absl::StatusOr<CommandOutput> output = RunCommand(argv, timeout_seconds);
  if (absl::IsNotFound(output.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat("--executor=slurm: no ", argv[0], " on PATH (", output.status().message(),
                     "): run the sweep on a machine of the Slurm cluster, such as a login node"));
  }
  if (!output.ok()) return absl::UnavailableError(absl::StrCat("--executor=slurm: ", output.status().message()));
  if (output->exit_code != 0) {
    return absl::FailedPreconditionError(absl::StrCat("--executor=slurm: ", absl::StrJoin(argv, " "),
                                                      " refused (exit code ", output->exit_code, "): ",
                                                      absl::StripAsciiWhitespace(output->err)));
  }
  return output;
}

// This user's tasks in the queue (pending, running, completing, requeued, ...): task id ("123_4") -> state.
absl::StatusOr<std::map<std::string, std::string>> QueuedTasks(double timeout_seconds) {
  const struct passwd* user = ::getpwuid(::getuid());
  const std::string name = user != nullptr ? user->pw_name : std::to_string(::getuid());
  absl::StatusOr<CommandOutput> output =
      RunSlurmCommand({"squeue", "--noheader", "--array", "--user=" + name, "--format=%i %T"}, timeout_seconds);
  if (!output.ok()) return output.status();
  std::map<std::string, std::string> tasks;
  for (absl::string_view line : absl::StrSplit(output->out, '\n', absl::SkipWhitespace())) {
    const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() == 2) tasks[fields[0]] = fields[1];
  }
  return tasks;
}

// <output_dir>/slurm/jobs.txt: one "<task id> <run name>" line per submitted task, the newest last.
// Returns run name -> its newest task id.
absl::StatusOr<std::map<std::string, std::string>> ReadSubmittedTasks(const SweepPlan& plan) {
  std::map<std::string, std::string> task_of;
  if (!FileExists(JobsPath(plan))) return task_of;
  absl::StatusOr<std::string> text = ReadFile(JobsPath(plan));
  if (!text.ok()) return text.status();
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipWhitespace())) {
    ++line_number;
    const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() != 2) {
      return absl::DataLossError(absl::StrCat(JobsPath(plan), ":", line_number,
                                              ": expected \"<task id> <run name>\", got \"", line, "\""));
    }
    task_of[fields[1]] = fields[0];
  }
  return task_of;
}

absl::Status RecordSubmittedTasks(const SweepPlan& plan, const std::string& lines) {
  std::string text;
  if (FileExists(JobsPath(plan))) {
    absl::StatusOr<std::string> before = ReadFile(JobsPath(plan));
    if (!before.ok()) return before.status();
    text = *before;
  }
  return WriteFileAtomically(JobsPath(plan), text + lines);
}

// The batch script of one submission: array task N trains line N + 1 of the run list ("<threads> <run dir>").
std::string BatchScript(const SlurmOptions& slurm) {
  std::vector<std::string> command;
  for (const std::string& word : slurm.command) command.push_back(ShellQuote(word));
  const std::string gpus = slurm.gpus_per_run > 0 ? absl::StrCat(" --gpus=", slurm.gpus_per_run) : "";
  return absl::StrCat(R"SH(#!/bin/bash
# Written by `sweep --executor=slurm` (experiments/sweep/slurm_executor.cc): array task N trains the run on
# line N + 1 of the run list given as the argument ("<threads> <run folder>"), appending to its log.txt.
set -u
line="$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" "$1")"
read -r threads run_dir <<<"$line"
if [[ -z "${run_dir:-}" ]]; then
  echo "sweep task: no run on line $((SLURM_ARRAY_TASK_ID + 1)) of $1" >&2
  exit 2
fi
cd "$run_dir" || exit 2
export LMF_NUM_THREADS="${LMF_NUM_THREADS:-$threads}"
# SIGTERM (preemption, the time limit, scancel --signal=TERM) reaches the training step below, which
# finishes its step, writes a checkpoint and exits with status 4; this shell waits for it, then requeues.
trap 'echo "sweep task: SIGTERM: the run checkpoints, then the task requeues"' TERM
echo "==== $(date '+%Y-%m-%d %H:%M:%S'): Slurm task ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID} (job $SLURM_JOB_ID, restart ${SLURM_RESTART_COUNT:-0}) starts this run" >>log.txt
srun --ntasks=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}")SH",
                      gpus, " ", absl::StrJoin(command, " "), R"SH( --config="$run_dir/config.textproto" >>log.txt 2>&1
status=$?
if [[ $status -eq 4 ]]; then
  echo "==== stopped by a signal after a checkpoint: task ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID} requeues" >>log.txt
  scontrol requeue "$SLURM_JOB_ID" >>log.txt 2>&1 ||
    echo "==== scontrol requeue failed: the sweep started again submits this run again" >>log.txt
fi
exit $status
)SH");
}

// Submits `todo` as one array; returns its job id after recording its tasks in jobs.txt.
absl::StatusOr<std::string> SubmitArray(const SweepPlan& plan, const std::vector<size_t>& todo,
                                        const SlurmOptions& slurm) {
  const std::string dir = SlurmDir(plan);
  int number = 1;
  while (FileExists(absl::StrCat(dir, "/array-", number, ".runs"))) ++number;
  const std::string runs_path = absl::StrCat(dir, "/array-", number, ".runs");
  const std::string script_path = absl::StrCat(dir, "/array-", number, ".sbatch");
  std::string runs;
  for (const size_t i : todo) {
    // A parallel run's ranks (data x pipeline x expert) share its CPUs, as in the local executor.
    const config::ParallelConfig& parallel = plan.runs[i].experiment.run().parallel();
    const int threads = std::max(1, slurm.cpus_per_run / config::ProcessCount(parallel));
    absl::StrAppend(&runs, threads, " ", RunDir(plan, plan.runs[i]), "\n");
  }
  if (absl::Status s = WriteFileAtomically(runs_path, runs); !s.ok()) return s;
  if (absl::Status s = WriteFileAtomically(script_path, BatchScript(slurm)); !s.ok()) return s;
  std::vector<std::string> argv = {
      // SIGTERM 2 minutes before a time limit: the run checkpoints and requeues while the task still runs.
      "sbatch", "--parsable", "--requeue", "--signal=TERM@120", "--open-mode=append", "--ntasks=1",
      absl::StrCat("--array=0-", todo.size() - 1,
                   slurm.max_concurrent > 0 ? absl::StrCat("%", slurm.max_concurrent) : ""),
      absl::StrCat("--cpus-per-task=", slurm.cpus_per_run), "--job-name=sweep-" + plan.name,
      absl::StrCat("--output=", std::filesystem::absolute(dir).string(), "/%A_%a.out")};
  if (slurm.gpus_per_run > 0) argv.push_back(absl::StrCat("--gpus=", slurm.gpus_per_run));
  if (!slurm.partition.empty()) argv.push_back("--partition=" + slurm.partition);
  if (!slurm.account.empty()) argv.push_back("--account=" + slurm.account);
  if (!slurm.time.empty()) argv.push_back("--time=" + slurm.time);
  argv.insert(argv.end(), {script_path, runs_path});
  absl::StatusOr<CommandOutput> output = RunSlurmCommand(argv, slurm.command_timeout_seconds);
  if (!output.ok()) return output.status();
  // --parsable: "<job id>" or "<job id>;<cluster>".
  const std::vector<std::string> parts = absl::StrSplit(output->out, ';');
  const std::string job_id(absl::StripAsciiWhitespace(parts[0]));
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(job_id, &parsed)) {
    return absl::InternalError(absl::StrCat("--executor=slurm: sbatch --parsable printed \"", output->out,
                                            "\", not a job id"));
  }
  std::string lines;
  for (size_t t = 0; t < todo.size(); ++t) absl::StrAppend(&lines, job_id, "_", t, " ", plan.runs[todo[t]].name, "\n");
  if (absl::Status s = RecordSubmittedTasks(plan, lines); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("array ", job_id, " submitted, but its tasks could not be recorded (",
                                               s.message(), "): cancel it with scancel ", job_id));
  }
  return job_id;
}

// Which of the followed runs are where: counted for the progress line.
struct ArrayCounts {
  int finished = 0, failed = 0, running = 0, pending = 0;
  bool operator!=(const ArrayCounts& o) const {
    return finished != o.finished || failed != o.failed || running != o.running || pending != o.pending;
  }
};

// Polls squeue until no task of `task_of` (run index -> task id) is in the queue, saying the counts each
// time they change. squeue failing kSqueueFailuresInARow times in a row ends the wait with its error.
absl::Status FollowTasks(const SweepPlan& plan, const std::map<size_t, std::string>& task_of,
                         const SlurmOptions& slurm, const std::function<void(const std::string&)>& say) {
  ArrayCounts last;
  bool said = false;
  int failures = 0;
  while (true) {
    absl::StatusOr<std::map<std::string, std::string>> queued = QueuedTasks(slurm.command_timeout_seconds);
    if (!queued.ok()) {
      if (++failures >= kSqueueFailuresInARow) return queued.status();
      say(absl::StrCat("[slurm] squeue failed (", failures, " in a row, ", kSqueueFailuresInARow,
                       " end the wait): ", queued.status().message()));
      std::this_thread::sleep_for(std::chrono::duration<double>(slurm.poll_seconds));
      continue;
    }
    failures = 0;
    ArrayCounts counts;
    for (const auto& [i, task] : task_of) {
      auto it = queued->find(task);
      if (it != queued->end()) {
        const bool running = it->second == "RUNNING" || it->second == "COMPLETING" || it->second == "CONFIGURING";
        ++(running ? counts.running : counts.pending);
        continue;
      }
      absl::StatusOr<config::SweepRunResult> result = ReadRunResult(RunDir(plan, plan.runs[i]));
      ++(result.ok() && result->status() == config::SweepRunResult::FINISHED ? counts.finished : counts.failed);
    }
    if (!said || counts != last) {
      say(absl::StrFormat("[slurm] %d finished, %d failed, %d running, %d pending", counts.finished,
                          counts.failed, counts.running, counts.pending));
      last = counts;
      said = true;
    }
    if (counts.running + counts.pending == 0) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::duration<double>(slurm.poll_seconds));
  }
}

// The result of a followed run once its task has left the queue; one that left none (killed, its node lost)
// gets a FAILED result naming its task and logs, as the local executor records a process that died.
absl::StatusOr<config::SweepRunResult> ResultOfTask(const SweepPlan& plan, const PlannedRun& run,
                                                    const std::string& task) {
  const std::string dir = RunDir(plan, run);
  absl::StatusOr<config::SweepRunResult> result = ReadRunResult(dir);
  if (result.ok()) return result;
  config::SweepRunResult failed;
  failed.set_status(config::SweepRunResult::FAILED);
  failed.set_message(absl::StrCat("Slurm task ", task, " ended without a result; see ", dir, "/log.txt and ",
                                  SlurmDir(plan), "/", task, ".out"));
  RecordTrainedSoFar(dir, run.experiment, run.size.training_flops_per_token, &failed);
  if (absl::Status s = WriteRunResult(dir, failed); !s.ok()) return s;
  return failed;
}

absl::Status CheckOptions(const SweepPlan& plan, const SlurmOptions& slurm) {
  if (slurm.command.empty()) return absl::InvalidArgumentError("--executor=slurm: no training command");
  if (slurm.cpus_per_run < 1)
    return absl::InvalidArgumentError(absl::StrCat("--cpus_per_run=", slurm.cpus_per_run, ": expected 1 or more"));
  if (slurm.gpus_per_run < 0)
    return absl::InvalidArgumentError(absl::StrCat("--gpus_per_run=", slurm.gpus_per_run, ": expected 0 or more"));
  if (slurm.max_concurrent < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_concurrent=", slurm.max_concurrent, ": expected 1 or more (0: no limit)"));
  }
  for (const PlannedRun& run : plan.runs) {
    if (!run.trunk.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--executor=slurm: run ", run.name, " is a WSD branch of ", run.trunk,
          " (wsd_branches: true): a branch starts from its trunk's checkpoint while the trunk trains, which the "
          "Slurm executor does not order; use the local executor or wsd_branches: false"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SlurmSubmission> SubmitSweepToSlurm(const SweepPlan& plan, const SlurmOptions& slurm,
                                                   const RunnerOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  if (absl::Status s = CheckOptions(plan, slurm); !s.ok()) return s;
  if (absl::Status s = MakeDirs(SlurmDir(plan)); !s.ok()) return s;
  absl::StatusOr<std::map<std::string, std::string>> submitted = ReadSubmittedTasks(plan);
  if (!submitted.ok()) return submitted.status();
  absl::StatusOr<std::map<std::string, std::string>> queued = QueuedTasks(slurm.command_timeout_seconds);
  if (!queued.ok()) return queued.status();

  SlurmSubmission submission;
  std::map<size_t, std::string> followed;  // run index -> its task id
  auto in_flight = [&](size_t i) {
    auto task = submitted->find(plan.runs[i].name);
    if (task == submitted->end() || queued->count(task->second) == 0) return false;
    say(absl::StrFormat("[queued] %s: Slurm task %s is %s", plan.runs[i].name, task->second,
                        queued->at(task->second)));
    followed[i] = task->second;
    ++submission.queued;
    return true;
  };
  absl::StatusOr<SweepStart> start = StartSweep(plan, in_flight, options.progress);
  if (!start.ok()) return start.status();
  submission.skipped = start->skipped;
  if (!start->todo.empty()) {
    absl::StatusOr<std::string> job_id = SubmitArray(plan, start->todo, slurm);
    if (!job_id.ok()) return job_id.status();
    submission.job_id = *job_id;
    submission.submitted = static_cast<int>(start->todo.size());
    for (size_t t = 0; t < start->todo.size(); ++t) followed[start->todo[t]] = absl::StrCat(*job_id, "_", t);
  }
  say(absl::StrFormat("[slurm] %s: %d runs submitted%s, %d queued before, %d finished earlier",
                      plan.name, submission.submitted,
                      submission.job_id.empty() ? "" : absl::StrCat(" as job array ", submission.job_id),
                      submission.queued, submission.skipped));
  if (!slurm.wait) return submission;

  if (absl::Status s = FollowTasks(plan, followed, slurm, say); !s.ok()) return s;
  std::vector<config::SweepRunResult> results = start->results;
  for (const auto& [i, task] : followed) {
    absl::StatusOr<config::SweepRunResult> result = ResultOfTask(plan, plan.runs[i], task);
    if (!result.ok()) return result.status();
    results[i] = *result;
  }
  // The sweep folder's lock (start->lock) is held until the results and the report are written.
  absl::StatusOr<SweepSummary> summary = FinishSweep(plan, std::move(results), start->skipped, options);
  if (!summary.ok()) return summary.status();
  submission.summary = *std::move(summary);
  return submission;
}

}  // namespace lmf::sweep
