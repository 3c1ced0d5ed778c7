// One sweep run in its own process (see train_run.h).
#include "experiments/sweep/train_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "config/loader.h"
#include "config/model_conversion.h"
#include "config/run_length.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/sweep/runner.h"
#include "experiments/trainer/trainer.h"
#include "model/accounting/accounting.h"

namespace lmf::sweep {

absl::StatusOr<ModelSize> SizeOfModel(const config::Experiment& experiment) {
  auto model = config::ToModelConfig(experiment.model());
  if (!model.ok()) return model.status();
  const model::ParameterCounts counts = model::CountParameters(*model);
  ModelSize size;
  size.params = static_cast<double>(counts.total());
  size.non_embedding_params = static_cast<double>(counts.non_embedding());
  size.training_flops_per_token = model::CountFlopsPerToken(*model, model->context_length).training();
  if (counts.inactive_experts > 0) {
    size.active_params = static_cast<double>(counts.active());
    size.active_non_embedding_params = static_cast<double>(counts.active_non_embedding());
  }
  return size;
}

absl::Status TrainSweepRun(const std::string& config_path) {
  const auto start = std::chrono::steady_clock::now();
  auto experiment = config::LoadExperiment(config_path, {});
  if (!experiment.ok()) return experiment.status();
  const std::string run_dir = experiment->run().output_dir();
  config::SweepRunResult result;

  // A branch's first points are its trunk's evaluations before the branch step, in the trunk's metrics.jsonl.
  // They are copied when the branch first starts, while that log holds them: the trunk may be trained again
  // later (its config changed, or it is rewound for another branch) and its log cut back, while this branch
  // resumes from a checkpoint of its own and ends before the trunk gets there again (its curve then lost
  // those points for good).
  const std::string& from = experiment->run().init_from();
  const std::string trunk_log = run_dir + "/trunk_metrics.jsonl";
  if (!from.empty() && !FileExists(trunk_log)) {
    const std::string trunk_dir = std::filesystem::path(from).parent_path().parent_path().string();
    if (auto text = ReadFile(trunk_dir + "/metrics.jsonl"); text.ok()) {
      if (absl::Status s = WriteFileAtomically(trunk_log, *text); !s.ok()) return s;
    }
  }

  experiments::TrainOptions options;
  options.resume = true;  // an earlier attempt's checkpoints are continued, not discarded
  // The sweep forwards its SIGINT / SIGTERM (runner.h): finish the step and checkpoint, to resume next time.
  options.checkpoint_on_signal = true;
  // Not --resume by hand: the sweep resumes the run when it is started again (and skips it once finished).
  options.how_to_continue = "its sweep resumes it from that checkpoint when started again";
  auto trained = experiments::Train(*experiment, options);
  result.set_wall_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!trained.ok()) {
    result.set_status(absl::IsAborted(trained.status()) ? config::SweepRunResult::DIVERGED
                                                        : config::SweepRunResult::FAILED);
    result.set_message(std::string(trained.status().message()));
    // The tokens and FLOPs it trained before it stopped, not its plan's (results.csv shows them).
    auto size = SizeOfModel(*experiment);
    RecordTrainedSoFar(run_dir, *experiment, size.ok() ? size->training_flops_per_token : 0, &result);
    if (absl::Status s = WriteRunResult(run_dir, result); !s.ok()) return s;
    return trained.status();
  }

  // The validation curve from metrics.jsonl (every line with a val_loss). A run that started from another
  // run's checkpoint (a WSD branch) took that run's steps up to it as its own: their evaluations, in the
  // other run's metrics.jsonl, are the first points of its curve.
  auto size = SizeOfModel(*experiment);
  if (!size.ok()) return size.status();
  auto metrics = experiments::ReadMetricsLog(run_dir + "/metrics.jsonl");
  if (!metrics.ok()) return metrics.status();
  if (!from.empty() && !metrics->empty()) {
    const std::string trunk_dir = std::filesystem::path(from).parent_path().parent_path().string();
    auto trunk =
        experiments::ReadMetricsLog(FileExists(trunk_log) ? trunk_log : trunk_dir + "/metrics.jsonl");
    if (!trunk.ok()) return trunk.status();
    std::vector<experiments::StepMetrics> merged;
    for (const experiments::StepMetrics& m : *trunk) {
      if (m.step < metrics->front().step) merged.push_back(m);
    }
    merged.insert(merged.end(), metrics->begin(), metrics->end());
    *metrics = std::move(merged);
  }
  // The curve holds the evaluations of this run's own schedule (every eval_interval and the end), not the
  // extra ones a trunk makes for its branches (run.eval_steps): the points the run would have alone.
  const int64_t interval = experiment->run().eval_interval();
  const int64_t total_steps = config::TotalSteps(*experiment);
  auto on_schedule = [&](int64_t step) {
    return step == total_steps || (interval > 0 && step % interval == 0);
  };
  std::string curve = "step,tokens,flops,loss\n";
  double best = std::numeric_limits<double>::infinity(), last = NAN;
  int64_t tokens = 0;
  std::set<int64_t> evaluated;
  for (const experiments::StepMetrics& m : *metrics) {
    tokens = m.tokens;
    if (!m.val_loss.has_value()) continue;
    if (!std::isfinite(*m.val_loss)) {
      // An evaluation that diverged (the training loss stayed finite, or the trainer would have stopped):
      // the run diverged, whatever its later evaluations say.
      result.set_status(config::SweepRunResult::DIVERGED);
      result.set_message(absl::StrCat("validation loss is ", *m.val_loss, " at step ", m.step));
      RecordTrainedSoFar(run_dir, *experiment, size->training_flops_per_token, &result);
      if (absl::Status s = WriteRunResult(run_dir, result); !s.ok()) return s;
      return absl::AbortedError(absl::StrCat(config_path, ": ", result.message()));
    }
    if (!on_schedule(m.step)) continue;
    evaluated.insert(m.step);
    last = *m.val_loss;
    best = std::min(best, last);
    absl::StrAppendFormat(&curve, "%d,%d,%.6g,%.6f\n", m.step, m.tokens,
                          static_cast<double>(m.tokens) * size->training_flops_per_token, last);
  }
  if (!std::isfinite(last)) {
    result.set_status(config::SweepRunResult::FAILED);
    result.set_message("the run logged no validation loss: set data.val_tokens and run.eval_tokens");
    RecordTrainedSoFar(run_dir, *experiment, size->training_flops_per_token, &result);
    if (absl::Status s = WriteRunResult(run_dir, result); !s.ok()) return s;
    return absl::FailedPreconditionError(absl::StrCat(config_path, ": ", result.message()));
  }
  if (absl::Status s = WriteFileAtomically(run_dir + "/curve.csv", curve); !s.ok()) return s;
  // Evaluations its schedule asks for that nobody made: steps trained before the sweep asked for them (a
  // trunk that had passed a new branch's evaluation steps, a former branch now trained alone). The curve
  // goes without them; the result says so.
  std::vector<int64_t> missing;
  for (int64_t step = interval; interval > 0 && step <= total_steps; step += interval) {
    if (!evaluated.count(step)) missing.push_back(step);
  }
  if (!missing.empty()) {
    result.set_message(absl::StrCat("curve.csv lacks the evaluations at steps ", absl::StrJoin(missing, ", "),
                                    " (trained before the sweep asked for them)"));
  }
  result.set_status(config::SweepRunResult::FINISHED);
  result.set_final_loss(last);
  result.set_best_val_loss(best);
  result.set_tokens(static_cast<double>(tokens));
  result.set_flops(static_cast<double>(tokens) * size->training_flops_per_token);
  result.set_curve_file("curve.csv");
  return WriteRunResult(run_dir, result);
}

}  // namespace lmf::sweep
