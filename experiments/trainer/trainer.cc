// The training loop (see trainer.h).
#include "experiments/trainer/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "config/loader.h"
#include "config/model_conversion.h"
#include "config/run_length.h"
#include "distributed/data_parallel_step.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/data/token_batches.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/metrics/tensorboard_writer.h"
#include "experiments/schedule/lr_schedule.h"
#include "experiments/trainer/data_parallel.h"
#include "experiments/trainer/memory_check.h"
#include "experiments/trainer/optimizer.h"
#include "experiments/trainer/stop_signals.h"
#include "experiments/trainer/training_device.h"
#include "experiments/trainer/weights.h"
#include "kernels/core/context.h"
#include "kernels/memory/memory.h"
#include "model/accounting/accounting.h"
#include "model/accounting/training_memory.h"
#include "model/language_model/language_model.h"
#include "model/training/step_strategy.h"
#include "tokenizer/tokenizer_file.h"

namespace lmf::experiments {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// What must not change between a checkpoint and the run that resumes from it, or the continuation would
// be a different run: the model, the data stream (file, batch shape, seed).
// `then` is the checkpoint's config (ParseStoredExperiment: resolved as `now` is, so that a checkpoint of an
// older build compares equal); `how` names the continuation in the error: "resume from " or "start from
// run.init_from=".
absl::Status CheckResumable(const config::Experiment& now, const config::Experiment& then,
                            const std::string& checkpoint_path, const std::string& how) {
  auto differs = [&](const std::string& field, const std::string& detail = "") {
    return absl::FailedPreconditionError(absl::StrCat("cannot ", how, checkpoint_path, ": ", field,
                                                      " differs from the checkpoint's config",
                                                      detail.empty() ? "" : absl::StrCat(" (", detail, ")")));
  };
  if (const std::string d = config::ConfigDifference(then.model(), now.model()); !d.empty())
    return differs("model", d);
  if (then.data().train_tokens() != now.data().train_tokens()) {
    return differs("data.train_tokens",
                   absl::StrCat(then.data().train_tokens(), " -> ", now.data().train_tokens()));
  }
  {
    config::DataConfig mixture_then, mixture_now;  // the mixtures alone (val_tokens and tokenizer may change)
    *mixture_then.mutable_train_mixture() = then.data().train_mixture();
    *mixture_now.mutable_train_mixture() = now.data().train_mixture();
    if (const std::string d = config::ConfigDifference(mixture_then, mixture_now); !d.empty()) {
      return differs("data.train_mixture", d);
    }
  }
  const auto changed = [](auto a, auto b) { return absl::StrCat(a, " -> ", b); };
  if (then.run().batch_size() != now.run().batch_size()) {
    return differs("run.batch_size", changed(then.run().batch_size(), now.run().batch_size()));
  }
  if (then.run().grad_accum_steps() != now.run().grad_accum_steps()) {
    return differs("run.grad_accum_steps",
                   changed(then.run().grad_accum_steps(), now.run().grad_accum_steps()));
  }
  if (then.run().seed() != now.run().seed())
    return differs("run.seed", changed(then.run().seed(), now.run().seed()));
  return absl::OkStatus();
}

// A run that starts from another run's checkpoint at step `branch_step` (run.init_from) takes over those
// steps as its own: they must have been taken with this config's optimizer and learning rates (a WSD
// branch at or before its decay start; not a cosine run's checkpoint, nor one of another peak or warmup).
absl::Status CheckBranch(const config::Experiment& now, const config::Experiment& then,
                         const std::string& checkpoint_path, int64_t branch_step) {
  config::OptimizerConfig optimizer_then = then.optimizer(), optimizer_now = now.optimizer();
  optimizer_then.clear_lr(), optimizer_now.clear_lr();  // the learning rates are compared step by step below
  if (const std::string d = config::ConfigDifference(optimizer_then, optimizer_now); !d.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot start from run.init_from=", checkpoint_path,
                                                      ": optimizer differs from the checkpoint's config (", d,
                                                      ")"));
  }
  const LrSchedule before(then.schedule(), then.optimizer().lr(), config::TotalSteps(then),
                          config::TokensPerStep(then));
  const LrSchedule after(now.schedule(), now.optimizer().lr(), config::TotalSteps(now),
                         config::TokensPerStep(now));
  const auto mismatch = [&](int64_t step, double took, const char* source) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot start from run.init_from=%s: its run took step %d at lr %.9g (%s), this config's schedule "
        "gives "
        "%.9g there; a branch must share the learning rates of the %d steps it takes over (schedule, "
        "optimizer.lr; with WSD, branch at or before this run's decay start)",
        checkpoint_path, step + 1, took, source, after.At(step), branch_step));
  };
  for (int64_t step = 0; step < branch_step; ++step) {
    if (before.At(step) != after.At(step)) return mismatch(step, before.At(step), "by its config");
  }
  // The rates its steps really took, where its run folder logged them: a run extended by --resume took its
  // earlier steps under its earlier, shorter schedule, which its final config no longer says.
  const std::string run_dir = std::filesystem::path(checkpoint_path).parent_path().parent_path().string();
  if (FileExists(run_dir + "/metrics.jsonl")) {
    absl::StatusOr<std::vector<StepMetrics>> logged = ReadMetricsLog(run_dir + "/metrics.jsonl");
    if (!logged.ok()) return logged.status();
    for (const StepMetrics& m : *logged) {
      if (m.step >= 1 && m.step <= branch_step && m.lr != after.At(m.step - 1)) {
        return mismatch(m.step - 1, m.lr, "by its metrics.jsonl");
      }
    }
  }
  return absl::OkStatus();
}

// The training files are the ones the checkpoint's run read (its fingerprints, where it recorded them): the
// same windows are drawn only from the same ids.
absl::Status CheckSameData(const checkpoint::TrainerState& state, const std::vector<uint32_t>& fingerprints,
                           const TrainBatchSampler& sampler, const std::string& what) {
  if (state.train_data_size() == 0) return absl::OkStatus();  // a checkpoint from before fingerprints
  if (static_cast<size_t>(state.train_data_size()) != fingerprints.size()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot ", what, ": its run read ",
                                                      state.train_data_size(),
                                                      " training files, this config ", fingerprints.size()));
  }
  for (size_t i = 0; i < fingerprints.size(); ++i) {
    const checkpoint::DataFingerprint& then = state.train_data(static_cast<int>(i));
    const uint64_t num_tokens = sampler.files()[i].size();
    if (then.num_tokens() != num_tokens || then.crc32c() != fingerprints[i]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot ", what, ": the training file ", sampler.files()[i].path(),
          " changed since the checkpoint (",
          then.num_tokens() != num_tokens
              ? absl::StrCat(then.num_tokens(), " tokens then, ", num_tokens, " now")
              : "the same length, other ids",
          "; the checkpoint's run read ", then.path(), "): the run would not continue on the same data"));
    }
  }
  return absl::OkStatus();
}

bool UseProgressBar(const config::LoggingConfig& logging, FILE* console) {
  switch (logging.progress_bar()) {
    case config::LoggingConfig::ALWAYS: return true;
    case config::LoggingConfig::NEVER: return false;
    default: return ::isatty(::fileno(console)) == 1;
  }
}

// The training data as the step strategies read it.
class SamplerSource final : public model::MicroBatchSource {
 public:
  explicit SamplerSource(TrainBatchSampler& sampler) : sampler_(sampler) {}
  absl::Status Next(int32_t* ids, int32_t* targets) override { return sampler_.Next(ids, targets); }
  void Skip() override { sampler_.Skip(); }

 private:
  TrainBatchSampler& sampler_;
};

}  // namespace

absl::StatusOr<TrainResult> Train(const config::Experiment& experiment, const TrainOptions& options) {
  // First, so that a SIGINT or SIGTERM while the run starts (opening data, building or loading the model)
  // stops it after its first step with a checkpoint, as one during training does, instead of killing it.
  const StopSignals signals(options.checkpoint_on_signal);
  const config::RunConfig& run = experiment.run();
  const std::string& out = run.output_dir();
  const std::vector<int64_t> pinned(run.checkpoint_steps().begin(), run.checkpoint_steps().end());
  // Data parallelism (data_parallel.h): this process's rank; rank 0 alone writes the run folder.
  distributed::Collectives* group = options.collectives;
  const int world = run.parallel().data();
  if (group != nullptr && group->world_size() != world) {
    return absl::InvalidArgumentError(absl::StrCat("run.parallel.data=", world, " but the process group has ",
                                                   group->world_size(), " processes"));
  }
  const int rank = group != nullptr ? group->rank() : 0;
  const bool lead = rank == 0;
  // One trainer per run folder, taken first: a second one (a --resume while the first still runs) would
  // interleave its checkpoints and metrics with the first's. Held until Train returns; the kernel drops it
  // if the process dies. Where the filesystem has no locks, the run goes on unlocked, with a warning.
  if (absl::Status s = MakeDirs(out); !s.ok()) return s;
  std::optional<FileLock> lock;
  std::string lock_warning;
  if (!lead) {
    // The lead rank holds the lock for the whole group.
  } else if (absl::StatusOr<FileLock> acquired = FileLock::Acquire(out + "/.lock"); acquired.ok()) {
    lock = *std::move(acquired);
  } else if (acquired.status().code() == absl::StatusCode::kUnimplemented) {
    lock_warning = absl::StrCat("run folder not locked: ", acquired.status().message(),
                                "; do not start a second trainer on it");
  } else if (acquired.status().code() == absl::StatusCode::kFailedPrecondition) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run.output_dir=", out, " is in use by another train process: ", acquired.status().message()));
  } else {
    return absl::Status(
        acquired.status().code(),
        absl::StrCat("run.output_dir=", out, ": cannot lock the run folder: ", acquired.status().message()));
  }
  const std::string checkpoints = out + "/checkpoints";
  const std::string metrics_path = out + "/metrics.jsonl";
  if (lead && !options.resume && (FileExists(metrics_path) || !ListCheckpointSteps(checkpoints).empty())) {
    return absl::FailedPreconditionError(
        absl::StrCat("run.output_dir=", out,
                     " already holds a run; pass --resume to continue it or choose another folder"));
  }
  if (lock.has_value()) {
    if (absl::Status s = RemoveStaleRendezvous(out); !s.ok()) return s;
  }
  absl::StatusOr<model::ModelConfig> model_config = config::ToModelConfig(experiment.model());
  if (!model_config.ok()) return model_config.status();
  if (run.device() == config::RunConfig::CPU) {  // before any rank allocates (a GPU's memory is not checked)
    const config::ModelConfig& m = experiment.model();
    const model::ModelMemory need = model::CountModelMemory(
        *model_config, kernels::DType::kF32, int64_t{run.batch_size()} * m.context_length(), /*training=*/true);
    if (absl::Status s = CheckFitsInMemory(
            need, world, MemoryBytes(),
            absl::StrCat("experiment \"", experiment.name(), "\" (model.n_layers=", m.n_layers(),
                         ", model.d_model=", m.d_model(), ", model.ffn.d_ff=", m.ffn().d_ff(),
                         ", model.vocab_size=", m.vocab_size(), "; run.batch_size=", run.batch_size(),
                         " x model.context_length=", m.context_length(), " tokens per micro-batch)"));
        !s.ok()) {
      return s;
    }
  }
  std::unique_ptr<DataParallelLaunch> launch;  // the other ranks, when this process started them
  if (world > 1 && group == nullptr) {
    absl::StatusOr<std::unique_ptr<DataParallelLaunch>> started =
        DataParallelLaunch::Start(experiment, options);
    if (!started.ok()) return started.status();
    launch = *std::move(started);
    group = &launch->group();
  }
  // A failed collective: a rank died or stalled; name it where this process started it.
  auto collective_error = [&](const absl::Status& status) {
    const std::string dead = launch != nullptr ? launch->DeadWorkers(/*grace_ms=*/2000) : "";
    return absl::Status(status.code(), absl::StrCat("run.parallel.data=", world, ": ", status.message(),
                                                    dead.empty() ? "" : absl::StrCat("; ", dead)));
  };
  // How each step's gradients are computed: here, or split over the data-parallel ranks.
  std::unique_ptr<model::StepStrategy> strategy;
  if (group != nullptr) {
    strategy = std::make_unique<distributed::DataParallelStep>(*group);
  } else {
    strategy = std::make_unique<model::SingleProcessStep>();
  }
  // Rank 0 of a data-parallel run trains on the run's thread count, as its workers do (data_parallel.h).
  absl::StatusOr<std::unique_ptr<TrainingDevice>> device =
      TrainingDevice::Open(run, launch != nullptr ? &launch->pool() : nullptr);
  if (!device.ok()) return device.status();
  const kernels::Context& ctx = (*device)->context();
  absl::StatusOr<std::unique_ptr<model::LanguageModel>> created =
      model::LanguageModel::Create(*model_config, ctx, (*device)->activations());
  if (!created.ok()) return created.status();
  model::LanguageModel& model = **created;
  model.InitializeParameters(run.seed());

  const int64_t batch = run.batch_size();
  const int64_t context = experiment.model().context_length();
  TokenFileExpectations expect;
  expect.model_vocab_size = experiment.model().vocab_size();
  expect.batch_size = batch;
  expect.context_length = context;
  if (!experiment.data().tokenizer().empty()) {
    absl::StatusOr<tokenizer::Tokenizer> tok = tokenizer::LoadTokenizer(experiment.data().tokenizer());
    if (!tok.ok()) return tok.status();
    expect.tokenizer_hash = tok->Hash();
  }
  std::vector<TrainSource> sources;
  for (int i = 0; i < experiment.data().train_mixture_size(); ++i) {
    const config::TokenSource& source = experiment.data().train_mixture(i);
    if (!FileExists(source.path())) {
      return absl::NotFoundError(
          absl::StrCat("data.train_mixture[", i, "].path=", source.path(), ": no such file"));
    }
    sources.push_back({source.path(), source.weight()});
  }
  if (sources.empty()) sources.push_back({experiment.data().train_tokens(), 1.0});
  absl::StatusOr<TrainBatchSampler> sampler = TrainBatchSampler::Open(sources, expect, run.seed());
  if (!sampler.ok()) return sampler.status();
  const std::vector<uint32_t> fingerprints = sampler->Fingerprints();
  std::optional<ValidationBatches> validation;
  if (run.eval_tokens() > 0) {
    TokenFileExpectations expect_val = expect;
    if (!expect_val.tokenizer_hash.has_value()) {  // no data.tokenizer: the training data's tokenizer, then
      expect_val.tokenizer_hash = sampler->tokenizer_hash();
      expect_val.tokenizer_hash_source = "the training data";
    }
    absl::StatusOr<ValidationBatches> val =
        ValidationBatches::Open(experiment.data().val_tokens(), expect_val, run.eval_tokens());
    if (!val.ok()) return val.status();
    validation = *std::move(val);
  }
  ModelOptimizer optimizer(experiment.optimizer(), model);

  const bool bar = UseProgressBar(experiment.logging(), options.console);
  const int64_t total_steps = config::TotalSteps(experiment);
  ConsoleReporter console(options.console, bar, total_steps);
  // The run's peak for MFU. Data parallel: run.peak_flops is the machine's; a measured peak is one rank's
  // share of the cores, times the ranks, but no more than all the cores' (ranks * threads > cores).
  std::optional<double> peak_flops = (*device)->peak_flops();
  std::string peak_source = (*device)->peak_flops_source();
  if (peak_flops.has_value() && world > 1 && !run.peak_flops()) {
    const int threads = ctx.num_threads();
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const double scale = std::min<double>(world, static_cast<double>(cores) / threads);
    *peak_flops *= scale;
    peak_source = absl::StrFormat("%g ranks' share of the cores: %s", scale, peak_source);
  }
  console.Message(absl::StrCat(
      "device: ", (*device)->name(), ", ", config::RunConfig::Precision_Name(run.precision()),
      "; MFU against ",
      peak_flops.has_value() ? absl::StrFormat("%.4g FLOP/s (%s)", *peak_flops, peak_source) : peak_source,
      run.gemm_autotune() ? "; GEMMs autotuned (run.gemm_autotune)" : ""));

  if (run.eval_tokens() == 0 && !experiment.data().val_tokens().empty()) {
    // A validation file that is never read: the user meant evaluations and would otherwise find none.
    console.Message(absl::StrCat("data.val_tokens=", experiment.data().val_tokens(),
                                 " is set but run.eval_tokens is 0: no validation loss is computed (set "
                                 "run.eval_tokens to the validation tokens each evaluation reads)"));
  }
  if (model_config->init == model::InitScheme::kMup) {
    console.Message(
        absl::StrFormat("muP: width multiplier %g (d_model %d / base %d): the blocks' matrices and "
                        "the LM head at lr / %g",
                        model_config->mup_width_multiplier(), model_config->d_model,
                        model_config->mup_base_d_model, model_config->mup_width_multiplier()));
  }

  int64_t start_step = 0;
  int64_t tokens = 0;
  double train_seconds = 0;
  TrainResult result;
  // Continues from a loaded checkpoint (this run's own for --resume, or run.init_from's): weights, optimizer
  // state, data position, step and counters.
  auto restore = [&](const LoadedCheckpoint& loaded) -> absl::Status {
    if (absl::Status s = LoadWeights(loaded.model, model); !s.ok()) return s;
    if (absl::Status s = optimizer.Restore(*loaded.optimizer, loaded.state.optimizer_step()); !s.ok())
      return s;
    sampler->Restore({loaded.state.sampler_seed(), loaded.state.sampler_windows_drawn()});
    if (run.device() == config::RunConfig::CPU && loaded.state.has_threads() &&
        loaded.state.threads() != ctx.num_threads()) {
      console.Message(absl::StrCat(
          loaded.path, " was written by a run on ", loaded.state.threads(), " CPU threads and this one has ",
          ctx.num_threads(), ": it goes on as the same run up to rounding, not bit for bit (LMF_NUM_THREADS=",
          loaded.state.threads(), " for that)"));
    }
    start_step = loaded.state.step();
    tokens = loaded.state.tokens();
    train_seconds = loaded.state.train_seconds();
    result.last_checkpoint = loaded.path;
    result.steps = start_step;
    result.last_loss = loaded.state.last_loss();
    return absl::OkStatus();
  };
  if (!lock_warning.empty()) console.Message(lock_warning);
  bool restored = false;
  if (options.resume) {
    std::vector<std::string> skipped;
    absl::StatusOr<std::string> latest = LatestCheckpoint(checkpoints, &skipped);
    for (const std::string& why : skipped) console.Message(absl::StrCat("skipping damaged checkpoint: ", why));
    if (latest.ok()) {
      absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(*latest);
      if (!loaded.ok()) return loaded.status();
      absl::StatusOr<config::Experiment> then =
          config::ParseStoredExperiment(loaded->config_text, *latest + "/config.textproto");
      if (!then.ok()) return then.status();
      if (absl::Status s = CheckResumable(experiment, *then, *latest, "resume from "); !s.ok()) return s;
      if (absl::Status s = CheckSameData(loaded->state, fingerprints, *sampler, "resume from " + *latest);
          !s.ok()) {
        return s;
      }
      if (loaded->state.step() > total_steps) {  // before this config replaces the run's
        return absl::InvalidArgumentError(absl::StrCat(
            "--resume: ", *latest, " is at step ", loaded->state.step(), ", past this config's end at step ",
            total_steps, " (run.max_steps / run.max_tokens); a resumed run can only go on"));
      }
      if (absl::Status s = restore(*loaded); !s.ok()) return s;
      restored = true;
      console.Message(start_step == total_steps
                          ? absl::StrCat(*latest, " is the run's last step (", start_step,
                                         "): already finished, nothing to train")
                          : absl::StrCat("resuming from ", *latest, " (step ", start_step, ")"));
      if (lead) {
        // The damaged folders after the resumed step are not this run's future: set aside, with a word.
        absl::StatusOr<std::vector<std::string>> moved = MoveAsideDamagedCheckpoints(checkpoints, start_step);
        if (!moved.ok()) return moved.status();
        for (const std::string& to : *moved) {
          console.Message(absl::StrCat("moved the damaged checkpoint after step ", start_step, " to ", to));
        }
      }
    } else if (latest.status().code() == absl::StatusCode::kNotFound && !skipped.empty()) {
      // Starting over would overwrite the damaged folders and the metrics log: a run's progress lost
      // without a word. Damage a kill cannot cause (saves are staged and renamed) needs the user.
      return absl::DataLossError(absl::StrCat("--resume: every checkpoint in ", checkpoints, " is damaged (",
                                              absl::StrJoin(skipped, "; "),
                                              "); repair or move them aside to start the run over"));
    } else if (latest.status().code() == absl::StatusCode::kNotFound) {
      console.Message(absl::StrCat("--resume: no checkpoint in ", checkpoints, "; starting ",
                                   run.init_from().empty() ? "from scratch" : "from run.init_from"));
    } else {
      return latest.status();
    }
  }
  if (!restored && !run.init_from().empty()) {
    const std::string& from = run.init_from();
    absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(from);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("run.init_from=", from, ": ", loaded.status().message(),
                                       FileExists(from + "/checkpoints")
                                           ? " (a run folder: name one of its checkpoints/step_* folders)"
                                       : !ListCheckpointSteps(from).empty()
                                           ? " (a checkpoints folder: name one of its step_* folders)"
                                           : ""));
    }
    absl::StatusOr<config::Experiment> then =
        config::ParseStoredExperiment(loaded->config_text, from + "/config.textproto");
    if (!then.ok()) return then.status();
    if (absl::Status s = CheckResumable(experiment, *then, from, "start from run.init_from="); !s.ok())
      return s;
    if (loaded->state.step() >= total_steps) {
      return absl::InvalidArgumentError(absl::StrCat("run.init_from=", from, " is at step ",
                                                     loaded->state.step(),
                                                     ", not before this run's end at step ", total_steps));
    }
    if (absl::Status s = CheckBranch(experiment, *then, from, loaded->state.step()); !s.ok()) {
      return s;
    }
    if (absl::Status s =
            CheckSameData(loaded->state, fingerprints, *sampler, "start from run.init_from=" + from);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = restore(*loaded); !s.ok()) return s;
    console.Message(absl::StrCat("starting from ", from, " (step ", start_step, "; run.init_from)"));
  }

  for (const int64_t step : pinned) {
    if (lead && step <= start_step && !FileExists(CheckpointPath(checkpoints, step))) {
      console.Message(absl::StrCat("run.checkpoint_steps: step ", step,
                                   " is not written: this run starts after step ", start_step));
    }
  }
  if (group != nullptr) {
    if (absl::Status s = strategy->SyncParameters(model); !s.ok()) return collective_error(s);
    console.Message(absl::StrCat(
        "data parallel: rank ", rank, " of ", world, ", micro-batches ",
        strategy->first_micro_batch(run.grad_accum_steps()) + 1, "-",
        strategy->first_micro_batch(run.grad_accum_steps()) + strategy->micro_batch_count(run.grad_accum_steps()),
        " of each step's ", run.grad_accum_steps(), lead ? "; the other ranks log to rank_<r>.log" : ""));
  }
  const std::string config_text = config::ExperimentToText(experiment);
  if (lead) {
    if (absl::Status s = WriteFileAtomically(out + "/config.textproto", config_text); !s.ok()) return s;
  }
  // A continuation (a resume, a branch) takes the run's log up to its first step: the lines a killed run
  // wrote past that checkpoint are not this run's, even where this continuation does not log
  // (logging.metrics_jsonl: false), which would otherwise leave them for the sweep's curve to read.
  const std::optional<int64_t> continues_after =
      start_step > 0 || options.resume ? std::optional<int64_t>(start_step) : std::nullopt;
  std::optional<MetricsLog> metrics;
  if (lead && experiment.logging().metrics_jsonl()) {
    absl::StatusOr<MetricsLog> log = MetricsLog::Open(metrics_path, continues_after);
    if (!log.ok()) return log.status();
    metrics = *std::move(log);
  } else if (lead && continues_after.has_value()) {
    if (absl::Status s = DropMetricsAfterStep(metrics_path, *continues_after); !s.ok()) return s;
  }
  // A new event file only where this process will log to it: resuming a finished run trains nothing, and
  // each empty file would be one more run in TensorBoard's list.
  std::optional<TensorBoardWriter> events;
  if (lead && experiment.logging().tensorboard() && start_step < total_steps) {
    absl::StatusOr<TensorBoardWriter> writer = TensorBoardWriter::Create(out);
    if (!writer.ok()) return writer.status();
    events = *std::move(writer);
    if (options.resume) {
      if (absl::Status s = events->WriteRestart(start_step + 1); !s.ok()) return s;
    }
  }

  const int64_t accum = run.grad_accum_steps();
  const int64_t tokens_per_step = config::TokensPerStep(experiment);
  const LrSchedule schedule(experiment.schedule(), experiment.optimizer().lr(), total_steps, tokens_per_step);
  const double flops_per_token = model::CountFlopsPerToken(*model_config, context).training();
  SamplerSource source(*sampler);
  // run.op_profile_steps: steps [profile_first, profile_end) are profiled (from the second step this
  // process trains, skipping the first one's allocations and GEMM plans; the first when it trains only one).
  const int64_t profile_first = std::min(start_step + 1, total_steps - 1);
  const int64_t profile_end =
      run.op_profile_steps() > 0 ? std::min(total_steps, profile_first + run.op_profile_steps()) : profile_first;

  for (int64_t step = start_step; step < total_steps; ++step) {
    if (step == profile_first && profile_end > profile_first) {
      if (absl::Status s = (*device)->StartOpProfile(); !s.ok()) return s;
    }
    const Clock::time_point started = Clock::now();
    const double lr = schedule.At(step);
    model::StepInput step_input;
    step_input.micro_batches = accum;
    step_input.b = batch;
    step_input.t = context;
    step_input.lr = lr;
    step_input.received_signal = [&signals] { return signals.received(); };
    absl::StatusOr<model::StepResult> stepped = strategy->Step(model, optimizer.adamw(), source, step_input);
    if (!stepped.ok()) return group != nullptr ? collective_error(stepped.status()) : stepped.status();
    const double loss = stepped->loss, grad_norm = stepped->grad_norm;
    int stop_signal = stepped->stop_signal;
    const int64_t completed = step + 1;
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      const std::string message = absl::StrCat(
          "step ", completed, ": ", std::isfinite(loss) ? "gradient norm" : "loss", " is ",
          std::isfinite(loss) ? grad_norm : loss, "; stopping before the update. Last good checkpoint: ",
          result.last_checkpoint.empty() ? "none written yet" : result.last_checkpoint);
      console.Message(message);
      console.Finish();
      return absl::AbortedError(message);
    }
    tokens += tokens_per_step;
    kernels::Synchronize(ctx);  // the update is queued on a GPU's stream; the step ends when it is done
    const double step_seconds = Seconds(started);
    train_seconds += step_seconds;
    if (completed == profile_end && profile_end > profile_first) {
      const int profiled = static_cast<int>(profile_end - profile_first);
      absl::StatusOr<TrainingDevice::OpProfileReport> report = (*device)->FinishOpProfile(profiled);
      if (!report.ok()) return report.status();
      const std::string path = out + "/op_profile.txt";
      const std::string text = absl::StrCat(
          "# time per op and step, steps ", profile_first + 1, "-", profile_end, " on ", (*device)->name(), "\n# ",
          report->method, "\n", report->table);
      if (lead) {
        if (absl::Status s = WriteFileAtomically(path, text); !s.ok()) return s;
      }
      console.Message(absl::StrCat("op profile of steps ", profile_first + 1, "-", profile_end, ": ", path,
                                   " (largest: ", report->largest, ")"));
    }

    StepMetrics m;
    m.step = completed;
    m.tokens = tokens;
    m.loss = loss;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.tokens_per_second = static_cast<double>(tokens_per_step) / step_seconds;
    m.mfu = peak_flops.has_value() ? m.tokens_per_second * flops_per_token / *peak_flops : 0.0;
    m.wall_seconds = train_seconds;
    if (model.config().z_loss > 0) m.z_loss = stepped->z_loss;
    const bool last = completed == total_steps;
    const bool checkpoint_step =
        last || (run.checkpoint_interval() > 0 && completed % run.checkpoint_interval() == 0) ||
        std::find(pinned.begin(), pinned.end(), completed) != pinned.end();
    if (group != nullptr && checkpoint_step) {
      // The ranks' copies of the weights must be one.
      if (absl::Status s = strategy->CheckReplicasAgree(model, completed); !s.ok()) {
        return s.code() == absl::StatusCode::kInternal ? s : collective_error(s);
      }
    }
    if (validation.has_value() &&
        (last || (run.eval_interval() > 0 && completed % run.eval_interval() == 0) ||
         std::find(run.eval_steps().begin(), run.eval_steps().end(), completed) != run.eval_steps().end())) {
      // Data parallel: each rank evaluates every world-th batch; the losses are summed in batch order.
      absl::StatusOr<std::vector<double>> losses =
          ValidationBatchLosses(model, *validation, batch, context, /*first=*/rank, /*stride=*/world);
      if (!losses.ok()) return losses.status();
      if (absl::Status s = strategy->SumOverProcesses(*losses); !s.ok()) return collective_error(s);
      m.val_loss = MeanInOrder(*losses);
      result.last_val_loss = m.val_loss;
    }
    result.steps = completed;
    result.last_loss = loss;

    if (metrics.has_value()) {
      if (absl::Status s = metrics->Append(m); !s.ok()) return s;
    }
    if (events.has_value()) {
      std::vector<std::pair<std::string, double>> scalars = {
          {"train/loss", loss}, {"train/lr", lr}, {"train/grad_norm", grad_norm},
          {"perf/tokens_per_second", m.tokens_per_second}, {"perf/mfu", m.mfu}};
      if (m.val_loss.has_value()) scalars.push_back({"val/loss", *m.val_loss});
      if (m.z_loss.has_value()) scalars.push_back({"train/z_loss", *m.z_loss});
      if (absl::Status s = events->WriteScalars(completed, scalars); !s.ok()) return s;
    }
    if (bar || last || completed % experiment.logging().log_interval() == 0 || step == start_step) console.Step(m);
    if (m.val_loss.has_value()) {
      console.Message(absl::StrFormat("eval step %d | val loss %.4f | val ppl %.2f", completed, *m.val_loss,
                                      std::exp(*m.val_loss)));
    }
    if (options.stop_after_step == completed) return result;

    if (group == nullptr) stop_signal = signals.received();  // else agreed on at the step's all-reduce
    if (lead && (checkpoint_step || stop_signal != 0)) {
      const HostTensors weights = ModelTensors(model);
      const HostTensors optimizer_state = optimizer.StateTensors();
      CheckpointContents contents;
      contents.model = weights.tensors;
      contents.optimizer = optimizer_state.tensors;
      contents.state.set_step(completed);
      contents.state.set_tokens(tokens);
      contents.state.set_sampler_seed(sampler->state().seed);
      contents.state.set_sampler_windows_drawn(sampler->state().windows_drawn);
      contents.state.set_optimizer_step(optimizer.step());
      contents.state.set_last_loss(loss);
      contents.state.set_train_seconds(train_seconds);
      contents.state.set_tokenizer_hash(sampler->tokenizer_hash());
      if (run.device() == config::RunConfig::CPU) contents.state.set_threads(ctx.num_threads());
      for (size_t i = 0; i < fingerprints.size(); ++i) {
        checkpoint::DataFingerprint* f = contents.state.add_train_data();
        f->set_path(sources[i].path);
        f->set_num_tokens(sampler->files()[i].size());
        f->set_crc32c(fingerprints[i]);
      }
      contents.config_text = config_text;
      absl::StatusOr<std::string> saved =
          SaveCheckpoint(checkpoints, contents, run.keep_checkpoints(), pinned);
      if (!saved.ok()) return saved.status();
      result.last_checkpoint = *saved;
      console.Message(absl::StrCat("checkpoint ", *saved));
    }
    if (stop_signal != 0 && !last) {
      console.Finish();
      return absl::CancelledError(absl::StrCat(
          "stopped by signal ", stop_signal, " after step ", completed,
          lead ? absl::StrCat("; checkpoint ", result.last_checkpoint) : "; rank 0 writes the checkpoint",
          "; ", options.how_to_continue));
    }
  }
  console.Finish();
  if (launch != nullptr) {
    if (absl::Status s = launch->Wait(); !s.ok()) return s;
  }
  return result;
}

}  // namespace lmf::experiments
