// The sweep runner (see runner.h): fork/exec one training process per run, a bounded number at a time,
// each in its own folder with its log; results collected from the runs' result.textproto files.
#include "experiments/sweep/runner.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "base/subprocess.h"
#include "config/loader.h"
#include "config/parallel_layout.h"
#include "config/run_length.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/data/token_batches.h"
#include "experiments/metrics/metrics_log.h"
#include "google/protobuf/text_format.h"
#include "tokenizer/token_file.h"

namespace lmf::sweep {
namespace {

std::string RunDir(const SweepPlan& plan, const PlannedRun& run) {
  return absl::StrCat(plan.output_dir, "/runs/", run.name);
}

// What a run's result depends on besides its config: the contents of its token files (training sources in
// order, then validation), one line each, with the fingerprint --resume compares (TokenFileFingerprint).
// Written beside config.textproto as data.stamp: a finished run whose files have changed since (a corpus
// re-encoded at the same path) trains again, as one whose config changed does; before, the sweep reused it
// and fitted runs of two corpora together. Each file is read once per sweep start (4096 ids).
constexpr char kNotReadable[] = ": not readable";

class DataStamps {
 public:
  std::string Of(const config::Experiment& e) {
    std::string stamp;
    for (const std::string& path : TrainingTokenFiles(e.data())) absl::StrAppend(&stamp, Line(path), "\n");
    if (!e.data().val_tokens().empty()) absl::StrAppend(&stamp, Line(e.data().val_tokens()), "\n");
    return stamp;
  }

 private:
  const std::string& Line(const std::string& path) {
    auto it = lines_.find(path);
    if (it != lines_.end()) return it->second;
    absl::StatusOr<tokenizer::TokenFileReader> file = tokenizer::TokenFileReader::Open(path);
    std::string line = file.ok() ? absl::StrFormat("%s: %d tokens, fingerprint %08x", path, file->size(),
                                                   experiments::TokenFileFingerprint(*file))
                                 : absl::StrCat(path, kNotReadable);
    return lines_.emplace(path, std::move(line)).first->second;
  }
  std::map<std::string, std::string> lines_;
};

// The first line of two data stamps that differs, for the rerun message ("" for none). A file that cannot be
// read now or could not then (moved, or a disk not mounted) is no evidence that its data changed: that line
// is passed over (a run resumed on other data is still refused by the trainer's own fingerprint check).
std::string DataChange(const std::string& before, const std::string& now) {
  const std::vector<std::string> a = absl::StrSplit(before, '\n'), b = absl::StrSplit(now, '\n');
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string x = i < a.size() ? a[i] : "", y = i < b.size() ? b[i] : "";
    if (x != y && !absl::EndsWith(x, kNotReadable) && !absl::EndsWith(y, kNotReadable))
      return absl::StrCat("data: ", x.empty() ? "(none)" : x, " is now ", y.empty() ? "(none)" : y);
  }
  return "";
}

// The last `lines` lines of a file, for failure messages.
std::string Tail(const std::string& path, int lines) {
  auto text = ReadFile(path);
  if (!text.ok()) return "";
  size_t pos = text->size();
  while (pos > 0 && (*text)[pos - 1] == '\n') --pos;
  for (int n = 0; n < lines && pos > 0; ++n) {
    pos = text->rfind('\n', pos - 1);
    if (pos == std::string::npos) {
      pos = 0;
      break;
    }
  }
  std::string tail = text->substr(pos);
  while (!tail.empty() && (tail[0] == '\n')) tail.erase(0, 1);
  return tail;
}

// Starts the command for one run; returns the child's pid. Its own process group: a Ctrl-C meant for the
// sweep reaches the run once, forwarded by the sweep (RunSweep), not twice (a second stop signal would end
// it without its checkpoint). Its log is appended to: an earlier attempt's stays readable above.
absl::StatusOr<pid_t> Launch(const std::vector<std::string>& command, const std::string& run_dir,
                             int threads_per_run) {
  ChildSpec child;
  child.argv = command;
  child.argv.push_back(absl::StrCat("--config=", run_dir, "/config.textproto"));
  child.log_path = run_dir + "/log.txt";
  child.log_header = LogStartLine("the sweep starts this run");
  child.working_dir = run_dir;
  child.own_process_group = true;
  child.parent_death_signal = SIGTERM;  // a sweep that dies any other way still stops its runs cleanly
  if (threads_per_run > 0 && std::getenv("LMF_NUM_THREADS") == nullptr) {  // the user's choice wins
    child.env.push_back({"LMF_NUM_THREADS", std::to_string(threads_per_run)});
  }
  absl::StatusOr<pid_t> pid = StartChild(child);
  if (!pid.ok())
    return absl::Status(pid.status().code(), absl::StrCat(run_dir, ": ", pid.status().message()));
  return pid;
}

scaling::RunResult ToRow(const PlannedRun& run, const config::SweepRunResult& result) {
  scaling::RunResult row;
  row.run = run.name;
  row.budget_flops = run.budget_flops;
  row.params = run.size.params;
  row.non_embedding_params = run.size.non_embedding_params;
  row.active_params = run.size.active_params;
  row.active_non_embedding_params = run.size.active_non_embedding_params;
  // A run that did not finish spent what its result records (RecordTrainedSoFar), or nothing where it
  // records nothing (a branch not started): never its planned length, which it did not train.
  const bool finished = result.status() == config::SweepRunResult::FINISHED;
  row.tokens = result.has_tokens() ? result.tokens() : finished ? run.tokens : 0;
  row.flops = result.has_flops() ? result.flops()
              : finished         ? run.flops
                                 : row.tokens * run.size.training_flops_per_token;
  row.d_model = run.experiment.model().d_model();
  row.n_layers = run.experiment.model().n_layers();
  row.n_heads = run.experiment.model().n_heads();
  row.batch_size = run.experiment.run().batch_size() * run.experiment.run().grad_accum_steps();
  row.lr = run.experiment.optimizer().lr();
  const bool has_loss = std::isfinite(result.final_loss()) && result.final_loss() > 0 &&
                        std::isfinite(result.best_val_loss()) && result.best_val_loss() > 0;
  switch (result.status()) {
    case config::SweepRunResult::FINISHED:
      row.status = has_loss ? scaling::RunStatus::kFinished : scaling::RunStatus::kFailed;
      break;
    case config::SweepRunResult::DIVERGED:
      row.status = scaling::RunStatus::kDiverged;
      break;
    default:
      row.status = scaling::RunStatus::kFailed;
  }
  if (row.status == scaling::RunStatus::kFinished) {
    row.final_loss = result.final_loss();
    row.best_val_loss = result.best_val_loss();
    if (!result.curve_file().empty())
      row.curve_file = absl::StrCat("runs/", run.name, "/", result.curve_file());
  }
  return row;
}

// SIGINT / SIGTERM while RunSweep waits: forwarded to the runs it is training (see RunSweep).
// A lock-free atomic, not a volatile sig_atomic_t: the handler may run on any thread of the process (a test
// runs RunSweep on its own thread), and only an atomic is race-free across threads as well as signal-safe.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");
void OnStopSignal(int signal) {
  int none = 0;
  if (!g_stop_signal.compare_exchange_strong(none, signal)) g_stop_signal.store(-1);  // -1: a second one
}

// Installs OnStopSignal for SIGINT, SIGTERM, SIGHUP (a closed terminal or SSH session) and SIGQUIT
// (without SA_RESTART, so that waitpid returns EINTR) while alive; the previous dispositions come back after.
class ForwardStopSignals {
 public:
  ForwardStopSignals() {
    g_stop_signal.store(0);
    struct sigaction action = {};
    action.sa_handler = OnStopSignal;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &action, &previous_[i]);
  }
  ~ForwardStopSignals() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  }

 private:
  static constexpr std::array<int, 4> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  std::array<struct sigaction, 4> previous_ = {};
};

// Stops (SIGTERM) and reaps the runs still in training when RunSweep returns early (an error).
class StopRunsOnReturn {
 public:
  explicit StopRunsOnReturn(
      const std::map<pid_t, std::pair<size_t, std::chrono::steady_clock::time_point>>& running)
      : running_(running) {}
  ~StopRunsOnReturn() {
    for (const auto& [child, run] : running_) ::kill(child, SIGTERM);
    for (const auto& [child, run] : running_) {
      int status = 0;
      while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }

 private:
  const std::map<pid_t, std::pair<size_t, std::chrono::steady_clock::time_point>>& running_;
};

// The steps of a run folder's complete checkpoints, ascending.
std::vector<int64_t> CheckpointSteps(const std::string& run_dir) {
  return experiments::ListCheckpointSteps(run_dir + "/checkpoints");
}

// Whether a run folder holds a checkpoint of its own (a run started before resumes from it).
bool HasCheckpoint(const std::string& run_dir) { return !CheckpointSteps(run_dir).empty(); }

// The first superseded-<n>/ of a run folder not taken yet, made (with `subfolder` inside it, if any).
absl::StatusOr<std::string> MakeSupersededFolder(const std::string& dir, const std::string& subfolder = "") {
  std::string aside;
  for (int n = 1;; ++n) {
    aside = absl::StrCat(dir, "/superseded-", n);
    if (!FileExists(aside)) break;
  }
  if (absl::Status s = MakeDirs(subfolder.empty() ? aside : aside + "/" + subfolder); !s.ok()) return s;
  return aside;
}

// Renames dir/name to aside/name.
absl::Status MoveInto(const std::string& dir, const std::string& name, const std::string& aside) {
  if (::rename((dir + "/" + name).c_str(), (aside + "/" + name).c_str()) != 0) {
    return absl::InternalError(absl::StrCat("sweep runner: cannot move ", dir, "/", name, " into ", aside,
                                            ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<config::SweepRunResult> ReadRunResult(const std::string& run_dir) {
  const std::string path = run_dir + "/result.textproto";
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  config::SweepRunResult result;
  if (!google::protobuf::TextFormat::ParseFromString(*text, &result)) {
    return absl::DataLossError(absl::StrCat(path, ": not a SweepRunResult textproto"));
  }
  return result;
}

void RecordTrainedSoFar(const std::string& run_dir, const config::Experiment& experiment,
                        double flops_per_token, config::SweepRunResult* result) {
  double tokens = 0;
  absl::StatusOr<std::vector<experiments::StepMetrics>> metrics =
      experiments::ReadMetricsLog(run_dir + "/metrics.jsonl");
  if (metrics.ok() && !metrics->empty()) {
    tokens = static_cast<double>(metrics->back().tokens);
  } else if (const std::string& from = experiment.run().init_from(); !from.empty()) {
    // A branch that completed no step of its own stands where its trunk's checkpoint (step_<N>) is.
    const std::string name = std::filesystem::path(from).filename().string();
    int64_t step = 0;
    if (absl::StartsWith(name, "step_") && absl::SimpleAtoi(name.substr(5), &step)) {
      tokens = static_cast<double>(step) * static_cast<double>(config::TokensPerStep(experiment));
    }
  }
  // Without a size per token (the model could not be sized) neither is recorded: FLOPs of 0 beside tokens
  // would make the results table unreadable (results.h: flops >= tokens).
  if (!(flops_per_token > 0)) return;
  result->set_tokens(tokens);
  result->set_flops(tokens * flops_per_token);
}

absl::Status WriteRunResult(const std::string& run_dir, const config::SweepRunResult& result) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(result, &text);
  return WriteFileAtomically(run_dir + "/result.textproto", text);
}

// Moves everything in a run folder but its config and earlier superseded-<n>/ folders into the first free
// superseded-<n>/; returns that folder's path.
absl::StatusOr<std::string> MoveRunAside(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = ListFolder(dir);
  if (!names.ok()) return names.status();
  absl::StatusOr<std::string> aside = MakeSupersededFolder(dir);
  if (!aside.ok()) return aside.status();
  for (const std::string& name : *names) {
    if (name == "config.textproto" || absl::StartsWith(name, "superseded-")) continue;
    if (absl::Status s = MoveInto(dir, name, *aside); !s.ok()) return s;
  }
  return aside;
}

// Moves a run's result and curve and its checkpoints after `step` into the first free superseded-<n>/, so
// that it resumes from its newest checkpoint at or before `step` (from scratch without one: then its metrics
// and events move too); returns that folder.
absl::StatusOr<std::string> RewindRun(const std::string& dir, int64_t step) {
  absl::StatusOr<std::string> aside = MakeSupersededFolder(dir, "checkpoints");
  if (!aside.ok()) return aside.status();
  auto move = [&](const std::string& name) -> absl::Status {
    return FileExists(dir + "/" + name) ? MoveInto(dir, name, *aside) : absl::OkStatus();
  };
  for (const int64_t s : CheckpointSteps(dir)) {
    if (s <= step) continue;
    if (absl::Status status = move(absl::StrFormat("checkpoints/step_%08d", s)); !status.ok()) return status;
  }
  std::vector<std::string> names = {"result.textproto", "curve.csv"};
  if (CheckpointSteps(dir).empty()) {  // from scratch: its metrics and events are the old run's, kept too
    absl::StatusOr<std::vector<std::string>> all = ListFolder(dir);
    if (!all.ok()) return all.status();
    for (const std::string& name : *all) {
      if (absl::StartsWith(name, "metrics.jsonl") || absl::StartsWith(name, "events.out.tfevents")) {
        names.push_back(name);
      }
    }
  }
  for (const std::string& name : names) {
    if (absl::Status s = move(name); !s.ok()) return s;
  }
  return aside;
}

namespace {

// Run name -> its place in plan.runs.
std::map<std::string, size_t> IndexOfRuns(const SweepPlan& plan) {
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < plan.runs.size(); ++i) index_of[plan.runs[i].name] = i;
  return index_of;
}

// A WSD branch still to train needs its trunk's checkpoint at its branch step. A trunk that will not write
// it (it finished without it, the checkpoint was deleted or is damaged, or the branch is new to the sweep;
// or it is unfinished but has checkpointed past that step) is rewound: its result and its checkpoints
// after the step move aside, and it trains on from its newest checkpoint before it (bit-identically, as
// --resume).
absl::Status RewindTrunksForBranches(const SweepPlan& plan, const std::map<std::string, size_t>& index_of,
                                     const std::function<void(const std::string&)>& say, SweepStart* start) {
  std::map<size_t, int64_t> needed;  // trunk -> the earliest missing branch step
  const std::set<size_t> to_run(start->todo.begin(), start->todo.end());
  for (const size_t i : to_run) {
    const PlannedRun& run = plan.runs[i];
    if (run.trunk.empty() || HasCheckpoint(RunDir(plan, run))) continue;
    const size_t trunk = index_of.at(run.trunk);
    const std::string& from = run.experiment.run().init_from();
    if (FileExists(from + "/trainer_state.textproto")) {
      // A checkpoint that fails verification (truncated, corrupt) would fail the branch at its start; it
      // counts as missing: moved into the trunk's checkpoints/damaged/ (where --resume puts the damaged
      // ones it passes over), and the trunk writes it again.
      // An error that says nothing of the checkpoint (a read error) leaves it where it is: the branch
      // then fails on it with that error, and the trunk is not retrained for it.
      const absl::Status intact = experiments::VerifyCheckpoint(from);
      if (intact.ok() || !experiments::IsCheckpointDamage(intact)) continue;
      absl::StatusOr<std::string> moved =
          experiments::MoveCheckpointToDamaged(std::filesystem::path(from).parent_path().string(),
                                               run.branch_step);
      if (!moved.ok()) return moved.status();
      say(absl::StrFormat("[damaged] %s: the checkpoint %s starts from is damaged (%s); moved to %s",
                          plan.runs[trunk].name, run.name, intact.message(), *moved));
    }
    const auto [it, fresh] = needed.insert({trunk, run.branch_step});
    if (!fresh) it->second = std::min(it->second, run.branch_step);
  }
  for (const auto& [trunk, step] : needed) {
    const std::string dir = RunDir(plan, plan.runs[trunk]);
    const std::vector<int64_t> steps = CheckpointSteps(dir);
    const bool unfinished = to_run.count(trunk) > 0;
    if (unfinished && (steps.empty() || steps.back() < step)) continue;  // it will pass the step
    absl::StatusOr<std::string> aside = RewindRun(dir, step);
    if (!aside.ok()) return aside.status();
    const std::vector<int64_t> kept = CheckpointSteps(dir);
    say(absl::StrFormat(
        "[rewind] %s: a branch starts from its checkpoint at step %d, which it does not have; "
        "it trains again from %s (what it had after it is kept in %s)",
        plan.runs[trunk].name, step,
        kept.empty() ? "scratch" : absl::StrCat("its checkpoint at step ", kept.back()), *aside));
    if (!unfinished) {
      if (absl::Status s = WriteFileAtomically(dir + "/config.textproto",
                                               config::ExperimentToText(plan.runs[trunk].experiment));
          !s.ok()) {
        return s;
      }
      start->results[trunk] = config::SweepRunResult();
      --start->skipped;
      start->todo.push_back(trunk);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SweepStart> StartSweep(const SweepPlan& plan, const std::function<bool(size_t)>& in_flight,
                                      const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  SweepStart start;
  if (absl::Status s = MakeDirs(plan.output_dir + "/runs"); !s.ok()) return s;
  // One sweep per folder: a second one would rewrite the configs and results of runs the first is training.
  if (absl::StatusOr<FileLock> acquired = FileLock::Acquire(plan.output_dir + "/.sweep.lock");
      acquired.ok()) {
    start.lock = *std::move(acquired);
  } else if (acquired.status().code() == absl::StatusCode::kFailedPrecondition) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sweep output_dir=", plan.output_dir, " is in use by another sweep: ", acquired.status().message()));
  } else if (acquired.status().code() == absl::StatusCode::kUnimplemented) {
    say(absl::StrCat("sweep folder not locked: ", acquired.status().message(),
                     "; do not start a second sweep on it"));
  } else {
    return acquired.status();
  }
  if (absl::Status s = WriteFileAtomically(plan.output_dir + "/plan.txt", FormatPlan(plan)); !s.ok())
    return s;

  DataStamps data_stamps;
  std::vector<size_t>& todo = start.todo;
  std::vector<config::SweepRunResult>& results = start.results;
  results.resize(plan.runs.size());
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    if (in_flight && in_flight(i)) continue;  // trained by an executor's job already: not touched
    const PlannedRun& run = plan.runs[i];
    const std::string dir = RunDir(plan, run);
    if (absl::Status s = MakeDirs(dir); !s.ok()) return s;
    // A run still training (started by an earlier sweep that died, or by hand) must not have its folder
    // moved, rewound or its result replaced under it.
    if (FileExists(dir + "/.lock")) {
      absl::StatusOr<FileLock> probe = FileLock::Acquire(dir + "/.lock");
      if (!probe.ok() && probe.status().code() == absl::StatusCode::kFailedPrecondition) {
        return absl::FailedPreconditionError(
            absl::StrCat("run ", run.name, " is being trained by another process (", probe.status().message(),
                         "); let it finish or stop it, then start the sweep again"));
      }
    }
    const std::string config_path = dir + "/config.textproto", stamp_path = dir + "/data.stamp";
    const std::string config_text = config::ExperimentToText(run.experiment);
    const std::string data_stamp = data_stamps.Of(run.experiment);
    auto previous = ReadRunResult(dir);
    const bool finished = previous.ok() && previous->status() == config::SweepRunResult::FINISHED;
    // What changed in the run's config since its folder was written ("" for nothing), compared resolved:
    // a config written by an older build lacks the fields added since, which it ran with at their defaults.
    std::string change = "no config.textproto";
    if (auto previous_config = ReadFile(config_path); previous_config.ok()) {
      absl::StatusOr<config::Experiment> stored =
          config::ParseStoredExperiment(*previous_config, config_path);
      if (stored.ok()) {
        // Compared without the branch wiring: a finished run stays finished when a longer run joins the
        // sweep and it becomes a branch, or its trunk changes.
        change =
            config::ConfigDifference(WithoutBranchWiring(*stored), WithoutBranchWiring(run.experiment));
      } else {
        change = std::string(stored.status().message());
      }
    }
    // A folder without data.stamp (written before it existed) is taken to have trained on today's files.
    if (auto stored = ReadFile(stamp_path); change.empty() && stored.ok())
      change = DataChange(*stored, data_stamp);
    if (finished && change.empty()) {
      if (!FileExists(stamp_path)) {
        if (absl::Status s = WriteFileAtomically(stamp_path, data_stamp); !s.ok()) return s;
      }
      results[i] = *previous;
      ++start.skipped;
      say(absl::StrFormat("[skip] %s finished earlier (loss %.4f)", run.name, previous->final_loss()));
      continue;
    }
    // A run trained (in part) under another config: resuming its checkpoints would mix the two.
    const bool trained_otherwise = !change.empty() && FileExists(config_path) &&
                                   (HasCheckpoint(dir) || FileExists(dir + "/metrics.jsonl"));
    if (finished || trained_otherwise) {
      // The whole earlier run (result, checkpoints, metrics, logs) moves into superseded-<n>/: kept, since it
      // was real, and out of the way, so that the rerun trains from scratch instead of resuming the old
      // checkpoint under the new config.
      absl::StatusOr<std::string> aside = MoveRunAside(dir);
      if (!aside.ok()) return aside.status();
      say(absl::StrFormat(
          "[rerun] %s: its config or data changed since it %s (%s); the earlier run is kept in %s", run.name,
          finished ? "finished" : "last trained", change, *aside));
    } else {
      ::unlink((dir + "/result.textproto").c_str());  // a failed or diverged run's, replaced by the rerun's
    }
    if (absl::Status s = WriteFileAtomically(config_path, config_text); !s.ok()) return s;
    if (absl::Status s = WriteFileAtomically(stamp_path, data_stamp); !s.ok()) return s;
    todo.push_back(i);
  }
  if (absl::Status s = RewindTrunksForBranches(plan, IndexOfRuns(plan), say, &start); !s.ok()) return s;
  return start;
}

absl::StatusOr<SweepSummary> RunSweep(const SweepPlan& plan, const RunnerOptions& options) {
  if (options.command.empty()) return absl::InvalidArgumentError("sweep runner: no training command");
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  absl::StatusOr<SweepStart> start = StartSweep(plan, nullptr, options.progress);
  if (!start.ok()) return start.status();
  const std::vector<size_t>& todo = start->todo;
  std::vector<config::SweepRunResult>& results = start->results;
  const std::map<std::string, size_t> index_of = IndexOfRuns(plan);
  const std::set<size_t> todo_set(todo.begin(), todo.end());
  // Run the missing ones, at most parallel_runs at a time, each WSD branch once its trunk's checkpoint is
  // there.
  std::set<size_t> unended(todo.begin(), todo.end());  // to run or running
  // Longest first (what each run trains itself), which shortens the sweep's wall time when runs train at
  // once: the long runs do not end up alone at the end. A branch waits for its trunk whatever its place.
  std::vector<size_t> waiting = todo;
  std::stable_sort(waiting.begin(), waiting.end(),
                   [&](size_t a, size_t b) { return plan.runs[a].OwnFlops() > plan.runs[b].OwnFlops(); });
  std::map<pid_t, std::pair<size_t, std::chrono::steady_clock::time_point>> running;
  size_t started = 0, done = 0;
  // SIGINT / SIGTERM: the runs in training get SIGTERM (each finishes its step, checkpoints and exits), no
  // new run starts, and RunSweep returns Cancelled once they have; a second signal kills them at once.
  const ForwardStopSignals forward;
  const StopRunsOnReturn stop_on_return(running);
  int forwarded = 0;
  while (!waiting.empty() || !running.empty()) {
    if (const int stop = g_stop_signal.load(); stop != 0 && forwarded != stop) {
      forwarded = stop;
      for (const auto& [child, run] : running) ::kill(child, forwarded == -1 ? SIGKILL : SIGTERM);
      waiting.clear();
      say(forwarded == -1
              ? "[stop] a second signal: the runs in training are killed"
              : "[stop] stopping: each run in training finishes its step and writes a checkpoint");
      if (running.empty()) break;
    }
    for (auto it = waiting.begin();
         it != waiting.end() && static_cast<int>(running.size()) < plan.parallel_runs;) {
      const size_t i = *it;
      const PlannedRun& run = plan.runs[i];
      const size_t trunk = run.trunk.empty() ? i : index_of.at(run.trunk);
      const std::string& from = run.experiment.run().init_from();
      // A branch starts once its trunk's checkpoint is there (renamed into place when complete, after the
      // trunk logged the steps before it), or once the trunk has ended without it.
      if (trunk != i && unended.count(trunk) && !FileExists(from + "/trainer_state.textproto") &&
          !HasCheckpoint(RunDir(plan, run))) {  // (one with a checkpoint of its own resumes from that)
        ++it;
        continue;
      }
      it = waiting.erase(it);
      if (trunk != i && todo_set.count(trunk) &&
          results[trunk].status() != config::SweepRunResult::FINISHED &&
          !FileExists(from + "/trainer_state.textproto") && !HasCheckpoint(RunDir(plan, run))) {
        // Its trunk failed before the branch point, in this sweep: nothing to start from. Where the trunk
        // diverged, so did this run: the steps it would take over are the same.
        config::SweepRunResult failed;
        failed.set_status(results[trunk].status() == config::SweepRunResult::DIVERGED
                              ? config::SweepRunResult::DIVERGED
                              : config::SweepRunResult::FAILED);
        failed.set_message(absl::StrCat("not started: its trunk ", run.trunk, " ended ",
                                        config::SweepRunResult::Status_Name(results[trunk].status()),
                                        " without the checkpoint it starts from (", from, ")"));
        failed.set_tokens(0);  // it trained nothing
        failed.set_flops(0);
        if (absl::Status s = WriteRunResult(RunDir(plan, run), failed); !s.ok()) return s;
        results[i] = failed;
        unended.erase(i);
        ++done;
        say(absl::StrFormat("[%d/%d] %s %s: %s", done, todo.size(), run.name,
                            config::SweepRunResult::Status_Name(failed.status()), failed.message()));
        continue;
      }
      // A parallel run's ranks (data x pipeline x expert) share its share of the cores.
      const config::ParallelConfig& parallel = run.experiment.run().parallel();
      const int threads = options.threads_per_run > 0
                              ? std::max(1, options.threads_per_run / config::ProcessCount(parallel))
                              : 0;
      auto pid = Launch(options.command, RunDir(plan, run), threads);
      if (!pid.ok()) return pid.status();
      running[*pid] = {i, std::chrono::steady_clock::now()};
      say(absl::StrFormat("[start] %s (%d of %d to run)%s", run.name, ++started, todo.size(),
                          trunk != i ? absl::StrFormat(" from %s step %d", run.trunk, run.branch_step) : ""));
    }
    if (running.empty()) {
      if (waiting.empty()) break;  // the last ones were recorded as not started
      // Cannot happen: a trunk is never a branch, so the first waiting branch's trunk is waiting and ready.
      return absl::InternalError(absl::StrCat("sweep runner: ", plan.runs[waiting.front()].name,
                                              " waits for a trunk that is not running"));
    }
    int wstatus = 0;
    const pid_t pid = ::waitpid(-1, &wstatus, WNOHANG);  // polled, so that a stop signal is seen at once
    if (pid == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (pid < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError("sweep runner: waitpid failed");
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    const size_t i = it->second.first;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second.second).count();
    running.erase(it);
    unended.erase(i);
    ++done;
    const PlannedRun& run = plan.runs[i];
    const std::string dir = RunDir(plan, run);
    auto result = ReadRunResult(dir);
    const bool exited_ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    if (result.ok() && (exited_ok || result->status() != config::SweepRunResult::FINISHED)) {
      results[i] = *result;
    } else {
      config::SweepRunResult failed;
      failed.set_status(config::SweepRunResult::FAILED);
      const std::string how = WIFEXITED(wstatus) ? absl::StrCat("exit code ", WEXITSTATUS(wstatus))
                                                 : absl::StrCat("signal ", WTERMSIG(wstatus));
      failed.set_message(
          absl::StrCat(how, result.ok() ? "" : ", no result file; log tail: ", Tail(dir + "/log.txt", 5)));
      failed.set_wall_seconds(seconds);
      RecordTrainedSoFar(dir, run.experiment, run.size.training_flops_per_token, &failed);
      if (absl::Status s = WriteRunResult(dir, failed); !s.ok()) return s;
      results[i] = failed;
    }
    const auto& r = results[i];
    if (r.status() == config::SweepRunResult::FINISHED) {
      say(absl::StrFormat("[%d/%d] %s finished: val loss %.4f (%.0f s)%s", done, todo.size(), run.name,
                          r.final_loss(), seconds,
                          r.message().empty() ? "" : absl::StrCat("; ", r.message())));
    } else if (g_stop_signal.load() != 0) {  // stopped by the sweep's signal, not failed: it resumes next time
      say(absl::StrFormat("[stop] %s stopped: %s (log: %s/log.txt)", run.name, r.message(), dir));
    } else {
      say(absl::StrFormat("[%d/%d] %s %s: %s (log: %s/log.txt)", done, todo.size(), run.name,
                          config::SweepRunResult::Status_Name(r.status()), r.message(), dir));
    }
  }

  if (g_stop_signal.load() != 0) {
    return absl::CancelledError(absl::StrCat(
        "stopped by a signal; the runs that were training wrote checkpoints (see their logs). Start ",
        options.restarted_by, " again to continue: finished runs are skipped and the others resume."));
  }
  // The lock (start->lock) is held until the results and the report are written.
  return FinishSweep(plan, std::move(results), start->skipped, options);
}

absl::StatusOr<SweepSummary> FinishSweep(const SweepPlan& plan, std::vector<config::SweepRunResult> results,
                                         int skipped, const RunnerOptions& options) {
  SweepSummary summary;
  summary.skipped = skipped;
  summary.table.path = plan.output_dir + "/results.csv";
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    // A run that did not finish, whose result an older build wrote without the tokens it trained: they are
    // read from its folder now, as it would record them (not 0, which is for a run that never started).
    if (results[i].status() != config::SweepRunResult::FINISHED && !results[i].has_tokens() &&
        results[i].status() != config::SweepRunResult::STATUS_UNSPECIFIED &&
        !absl::StartsWith(results[i].message(), "not started:")) {  // (a branch whose trunk failed: 0)
      RecordTrainedSoFar(RunDir(plan, plan.runs[i]), plan.runs[i].experiment,
                         plan.runs[i].size.training_flops_per_token, &results[i]);
    }
    scaling::RunResult row = ToRow(plan.runs[i], results[i]);
    switch (row.status) {
      case scaling::RunStatus::kFinished:
        ++summary.finished;
        break;
      case scaling::RunStatus::kFailed:
        ++summary.failed;
        break;
      case scaling::RunStatus::kDiverged:
        ++summary.diverged;
        break;
    }
    summary.table.runs.push_back(std::move(row));
  }
  summary.results_path = summary.table.path;
  if (absl::Status s = scaling::WriteResults(summary.results_path, summary.table); !s.ok()) return s;
  if (options.finish) {
    if (absl::Status s = options.finish(summary); !s.ok()) return s;
  }
  return summary;
}

}  // namespace lmf::sweep
