// The training loop (see trainer.h).
#include "experiments/trainer/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
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
#include "config/parallel_layout.h"
#include "config/run_length.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/data/token_batches.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/metrics/tensorboard_writer.h"
#include "experiments/schedule/lr_schedule.h"
#include "experiments/trainer/continuation.h"
#include "experiments/trainer/data_parallel.h"
#include "experiments/trainer/memory_check.h"
#include "experiments/trainer/optimizer.h"
#include "experiments/trainer/run_parallelism.h"
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

// The ranks are connected over the host group already and reach the NCCL group's start together.
constexpr std::chrono::seconds kDeviceGroupConnectTimeout{60};

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

bool UseProgressBar(const config::LoggingConfig& logging, FILE* console) {
  switch (logging.progress_bar()) {
    case config::LoggingConfig::ALWAYS: return true;
    case config::LoggingConfig::NEVER: return false;
    default: return ::isatty(::fileno(console)) == 1;
  }
}

// Whether any layer's channel mixer is a mixture of experts (model.moe, or a layer_pattern entry's).
bool HasMoeLayers(const model::ModelConfig& config) {
  for (int64_t i = 0; i < config.n_layers; ++i) {
    if (config.layer(i).channel_mixer.kind == model::ChannelMixerSpec::Kind::kMoe) return true;
  }
  return false;
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


// One training run, from its folder to its last step. Train() calls its steps in order; each returns an
// error for the user, and the members hold what later steps need.
class TrainingRun {
 public:
  TrainingRun(const config::Experiment& experiment, const TrainOptions& options)
      : experiment_(experiment),
        options_(options),
        run_(experiment.run()),
        out_(run_.output_dir()),
        checkpoints_(out_ + "/checkpoints"),
        metrics_path_(out_ + "/metrics.jsonl"),
        pinned_(run_.checkpoint_steps().begin(), run_.checkpoint_steps().end()),
        world_(config::ProcessCount(run_.parallel())),
        group_(options.collectives),
        rank_(group_ != nullptr ? group_->rank() : 0),
        lead_(rank_ == 0),
        total_steps_(config::TotalSteps(experiment)),
        bar_(UseProgressBar(experiment.logging(), options.console)),
        console_(options.console, bar_, total_steps_) {}

  absl::Status OpenRunFolder();
  absl::Status StartRanks();
  absl::Status ConnectDevices();
  absl::Status BuildModel();
  absl::Status OpenData();
  void Announce();
  absl::Status Continue();
  absl::Status OpenLogs();
  absl::StatusOr<TrainResult> TrainSteps(const StopSignals& signals);

 private:
  absl::Status Restore(const LoadedCheckpoint& loaded);
  absl::Status ResumeFromNewest(bool* restored);
  absl::Status StartFrom(const std::string& from);
  absl::Status StartOpProfile(int64_t step);
  absl::Status FinishOpProfile(int64_t completed);
  absl::Status Evaluate(int64_t completed, StepMetrics& m);
  absl::Status Log(const StepMetrics& m, int64_t step);
  absl::Status SaveCheckpoint(int64_t completed, double loss);
  // A failed collective: a rank died or stalled; named where this process started it.
  absl::Status CollectiveError(const absl::Status& status) const;

  const config::Experiment& experiment_;
  const TrainOptions& options_;
  const config::RunConfig& run_;
  const std::string out_, checkpoints_, metrics_path_;
  const std::vector<int64_t> pinned_;
  const int world_;
  distributed::Collectives* group_;  // data parallelism (data_parallel.h); null for one process
  const int rank_;
  const bool lead_;  // rank 0 alone writes the run folder
  const int64_t total_steps_;
  const bool bar_;
  ConsoleReporter console_;

  std::optional<FileLock> lock_;
  std::string lock_warning_;
  model::ModelConfig model_config_;
  std::unique_ptr<DataParallelLaunch> launch_;  // the other ranks, when this process started them
  int cuda_device_ = -1;                         // a CUDA data-parallel rank's (ConnectDevices); else run.cuda_device
  std::unique_ptr<distributed::Collectives> device_group_;  // its NCCL group, over group_'s ranks
  std::unique_ptr<RunParallelism> parallel_;     // groups, step strategy, optimizer shards (run.parallel)
  model::StepStrategy* strategy_ = nullptr;      // parallel_'s
  std::unique_ptr<TrainingDevice> device_;
  // This rank's slices of the model: the whole model, or its pipeline stages' (several when interleaved),
  // each with its optimizer; model_ and optimizer_ are the first.
  std::vector<std::unique_ptr<model::LanguageModel>> chunks_;
  std::vector<std::unique_ptr<ModelOptimizer>> optimizers_;
  model::LanguageModel* model_ = nullptr;
  ModelOptimizer* optimizer_ = nullptr;
  std::vector<TrainSource> sources_;
  std::optional<TrainBatchSampler> sampler_;
  std::vector<uint32_t> fingerprints_;
  std::optional<ValidationBatches> validation_;
  std::optional<double> peak_flops_;
  std::string config_text_;
  std::optional<MetricsLog> metrics_;
  std::optional<TensorBoardWriter> events_;

  int64_t start_step_ = 0;
  double noise_trace_ema_ = 0, noise_grad_sq_ema_ = 0;  // TensorBoard's gradient noise scale
  int64_t profile_first_ = 0, profile_end_ = 0;
  int64_t tokens_ = 0;
  double train_seconds_ = 0;
  TrainResult result_;
};

// One trainer per run folder, taken first: a second one (a --resume while the first still runs) would
// interleave its checkpoints and metrics with the first's. Held until Train returns; the kernel drops it
// if the process dies. Where the filesystem has no locks, the run goes on unlocked, with a warning.
absl::Status TrainingRun::OpenRunFolder() {
  if (group_ != nullptr && group_->world_size() != world_) {
    return absl::InvalidArgumentError(absl::StrCat(config::LayoutFields(run_.parallel()), " is ", world_,
                                                   " processes but the process group has ",
                                                   group_->world_size()));
  }
  if (absl::Status s = MakeDirs(out_); !s.ok()) return s;
  if (!lead_) {
    // The lead rank holds the lock for the whole group.
  } else if (absl::StatusOr<FileLock> acquired = FileLock::Acquire(out_ + "/.lock"); acquired.ok()) {
    lock_ = *std::move(acquired);
  } else if (acquired.status().code() == absl::StatusCode::kUnimplemented) {
    lock_warning_ = absl::StrCat("run folder not locked: ", acquired.status().message(),
                                 "; do not start a second trainer on it");
  } else if (acquired.status().code() == absl::StatusCode::kFailedPrecondition) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run.output_dir=", out_, " is in use by another train process: ", acquired.status().message()));
  } else {
    return absl::Status(
        acquired.status().code(),
        absl::StrCat("run.output_dir=", out_, ": cannot lock the run folder: ", acquired.status().message()));
  }
  if (lead_ && !options_.resume && (FileExists(metrics_path_) || !ListCheckpointSteps(checkpoints_).empty())) {
    return absl::FailedPreconditionError(
        absl::StrCat("run.output_dir=", out_,
                     " already holds a run; pass --resume to continue it or choose another folder"));
  }
  if (lock_.has_value()) {
    if (absl::Status s = RemoveStaleRendezvous(out_); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Checks that the model fits in memory before any rank allocates (a GPU's memory is not checked), then
// starts the other data-parallel ranks where this process is rank 0 of a run that has them, and picks how
// each step's gradients are computed: here, or split over the ranks.
absl::Status TrainingRun::StartRanks() {
  absl::StatusOr<model::ModelConfig> model_config = config::ToModelConfig(experiment_.model());
  if (!model_config.ok()) return model_config.status();
  model_config_ = *std::move(model_config);
  if (run_.device() == config::RunConfig::CPU) {
    const config::ModelConfig& m = experiment_.model();
    const kernels::DType activations =
        run_.precision() == config::RunConfig::BF16 ? kernels::DType::kBF16 : kernels::DType::kF32;
    const model::ModelMemory need = model::CountModelMemory(
        model_config_, activations, int64_t{run_.batch_size()} * m.context_length(), /*training=*/true);
    if (absl::Status s = CheckFitsInMemory(
            need, world_, MemoryBytes(),
            absl::StrCat("experiment \"", experiment_.name(), "\" (model.n_layers=", m.n_layers(),
                         ", model.d_model=", m.d_model(), ", model.ffn.d_ff=", m.ffn().d_ff(),
                         ", model.vocab_size=", m.vocab_size(), "; run.batch_size=", run_.batch_size(),
                         " x model.context_length=", m.context_length(), " tokens per micro-batch)"));
        !s.ok()) {
      return s;
    }
  }
  if (world_ > 1 && group_ == nullptr) {
    absl::StatusOr<std::unique_ptr<DataParallelLaunch>> started = DataParallelLaunch::Start(experiment_, options_);
    if (!started.ok()) return started.status();
    launch_ = *std::move(started);
    group_ = &launch_->group();
  }
  if (absl::Status s = ConnectDevices(); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<RunParallelism>> parallel =
      RunParallelism::Build(run_, model_config_.n_layers, group_, device_group_.get());
  if (!parallel.ok()) return CollectiveError(parallel.status());
  parallel_ = *std::move(parallel);
  strategy_ = parallel_->strategy();
  return absl::OkStatus();
}

// A CUDA data-parallel rank: its GPU (its local rank modulo the devices visible, said in the log) and the
// NCCL group of group_'s ranks, met through the store they met through.
absl::Status TrainingRun::ConnectDevices() {
  if (run_.device() != config::RunConfig::CUDA || group_ == nullptr) return absl::OkStatus();
  const int local_rank = options_.local_rank >= 0 ? options_.local_rank : rank_;
  absl::StatusOr<int> device = DataParallelCudaDevice(local_rank);
  if (!device.ok()) return device.status();
  cuda_device_ = *device;
  const GroupStore store = launch_ != nullptr ? GroupStore{launch_->rendezvous_dir(), "", 0} : options_.store;
  absl::StatusOr<std::unique_ptr<distributed::Collectives>> connected =
      ConnectDeviceGroup(*group_, store, cuda_device_, std::chrono::seconds(run_.parallel().timeout_seconds()),
                         kDeviceGroupConnectTimeout);
  if (!connected.ok()) return CollectiveError(connected.status());
  device_group_ = *std::move(connected);
  console_.Message(absl::StrCat("data parallel rank ", rank_, " trains on cuda:", cuda_device_, " (local rank ",
                                local_rank, " modulo the CUDA devices visible; run.cuda_device is not used), its "
                                "gradients summed over NCCL on the devices"));
  return absl::OkStatus();
}

absl::Status TrainingRun::CollectiveError(const absl::Status& status) const {
  const std::string dead = launch_ != nullptr ? launch_->DeadWorkers(/*grace_ms=*/2000) : "";
  return absl::Status(status.code(), absl::StrCat(config::LayoutFields(run_.parallel()), ": ", status.message(),
                                                  dead.empty() ? "" : absl::StrCat("; ", dead)));
}

// Opens the device and builds the model with its initial weights. Rank 0 of a data-parallel run trains on
// the run's thread count, as its workers do (data_parallel.h).
absl::Status TrainingRun::BuildModel() {
  config::RunConfig run = run_;
  if (cuda_device_ >= 0) run.set_cuda_device(cuda_device_);
  absl::StatusOr<std::unique_ptr<TrainingDevice>> device =
      TrainingDevice::Open(run, launch_ != nullptr ? &launch_->pool() : nullptr);
  if (!device.ok()) return device.status();
  device_ = *std::move(device);
  for (const model::LayerRange& range : parallel_->ChunkLayers()) {
    absl::StatusOr<std::unique_ptr<model::LanguageModel>> created = model::LanguageModel::Create(
        model_config_, device_->context(), device_->activations(), range, parallel_->expert_exchange());
    if (!created.ok()) return created.status();
    chunks_.push_back(*std::move(created));
    chunks_.back()->InitializeParameters(run_.seed());
  }
  model_ = chunks_[0].get();
  return absl::OkStatus();
}

// Opens the training files (data.train_tokens or data.train_mixture), the validation batches and the
// optimizer's state.
absl::Status TrainingRun::OpenData() {
  TokenFileExpectations expect;
  expect.model_vocab_size = experiment_.model().vocab_size();
  expect.batch_size = run_.batch_size();
  expect.context_length = experiment_.model().context_length();
  if (!experiment_.data().tokenizer().empty()) {
    absl::StatusOr<tokenizer::Tokenizer> tok = tokenizer::LoadTokenizer(experiment_.data().tokenizer());
    if (!tok.ok()) return tok.status();
    expect.tokenizer_hash = tok->Hash();
  }
  for (int i = 0; i < experiment_.data().train_mixture_size(); ++i) {
    const config::TokenSource& source = experiment_.data().train_mixture(i);
    if (!FileExists(source.path())) {
      return absl::NotFoundError(
          absl::StrCat("data.train_mixture[", i, "].path=", source.path(), ": no such file"));
    }
    sources_.push_back({source.path(), source.weight()});
  }
  if (sources_.empty()) sources_.push_back({experiment_.data().train_tokens(), 1.0});
  absl::StatusOr<TrainBatchSampler> sampler = TrainBatchSampler::Open(sources_, expect, run_.seed());
  if (!sampler.ok()) return sampler.status();
  sampler_ = *std::move(sampler);
  fingerprints_ = sampler_->Fingerprints();
  if (run_.eval_tokens() > 0) {
    TokenFileExpectations expect_val = expect;
    if (!expect_val.tokenizer_hash.has_value()) {  // no data.tokenizer: the training data's tokenizer, then
      expect_val.tokenizer_hash = sampler_->tokenizer_hash();
      expect_val.tokenizer_hash_source = "the training data";
    }
    absl::StatusOr<ValidationBatches> val =
        ValidationBatches::Open(experiment_.data().val_tokens(), expect_val, run_.eval_tokens());
    if (!val.ok()) return val.status();
    validation_ = *std::move(val);
  }
  absl::StatusOr<std::vector<std::unique_ptr<ModelOptimizer>>> optimizers =
      parallel_->MakeOptimizers(experiment_.optimizer(), chunks_);
  if (!optimizers.ok()) return optimizers.status();
  optimizers_ = *std::move(optimizers);
  optimizer_ = optimizers_[0].get();
  strategy_ = parallel_->strategy();
  return absl::OkStatus();
}

// The console's first lines: the device and the peak MFU is measured against, and what the config implies
// that a user may not expect.
void TrainingRun::Announce() {
  // Data parallel: run.peak_flops is the whole run's; a GPU's data-sheet peak is one rank's, times the ranks;
  // a measured CPU peak is one rank's share of the cores, times the ranks, but no more than all the cores'
  // (ranks * threads > cores).
  peak_flops_ = device_->peak_flops();
  std::string peak_source = device_->peak_flops_source();
  if (peak_flops_.has_value() && world_ > 1 && !run_.peak_flops() && run_.device() == config::RunConfig::CUDA) {
    *peak_flops_ *= world_;
    peak_source = absl::StrCat(world_, " GPUs x ", peak_source);
  } else if (peak_flops_.has_value() && world_ > 1 && !run_.peak_flops()) {
    const int threads = device_->context().num_threads();
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const double scale = std::min<double>(world_, static_cast<double>(cores) / threads);
    *peak_flops_ *= scale;
    peak_source = absl::StrFormat("%g ranks' share of the cores: %s", scale, peak_source);
  }
  console_.Message(absl::StrCat(
      "device: ", device_->name(), ", ", config::RunConfig::Precision_Name(run_.precision()),
      "; MFU against ",
      peak_flops_.has_value() ? absl::StrFormat("%.4g FLOP/s (%s)", *peak_flops_, peak_source) : peak_source,
      run_.gemm_autotune() ? "; GEMMs autotuned (run.gemm_autotune)" : ""));
  if (run_.eval_tokens() == 0 && !experiment_.data().val_tokens().empty()) {
    // A validation file that is never read: the user meant evaluations and would otherwise find none.
    console_.Message(absl::StrCat("data.val_tokens=", experiment_.data().val_tokens(),
                                  " is set but run.eval_tokens is 0: no validation loss is computed (set "
                                  "run.eval_tokens to the validation tokens each evaluation reads)"));
  }
  if (model_config_.init == model::InitScheme::kMup) {
    console_.Message(
        absl::StrFormat("muP: width multiplier %g (d_model %d / base %d): the blocks' matrices and "
                        "the LM head at lr / %g",
                        model_config_.mup_width_multiplier(), model_config_.d_model,
                        model_config_.mup_base_d_model, model_config_.mup_width_multiplier()));
  }
  if (!lock_warning_.empty()) console_.Message(lock_warning_);
}

// Continues from a loaded checkpoint (this run's own for --resume, or run.init_from's): weights, optimizer
// state, data position, step and counters.
absl::Status TrainingRun::Restore(const LoadedCheckpoint& loaded) {
  for (size_t c = 0; c < chunks_.size(); ++c) {  // a pipeline stage takes its names from the whole file
    absl::Status s = parallel_->pipelined() ? LoadSliceWeights(loaded.model, *chunks_[c])
                                         : LoadWeights(loaded.model, *chunks_[c]);
    if (s.ok()) s = optimizers_[c]->Restore(*loaded.optimizer, loaded.state.optimizer_step());
    if (!s.ok()) return s;
  }
  sampler_->Restore({loaded.state.sampler_seed(), loaded.state.sampler_windows_drawn()});
  const int threads = device_->context().num_threads();
  if (run_.device() == config::RunConfig::CPU && loaded.state.has_threads() && loaded.state.threads() != threads) {
    console_.Message(absl::StrCat(
        loaded.path, " was written by a run on ", loaded.state.threads(), " CPU threads and this one has ",
        threads, ": it goes on as the same run up to rounding, not bit for bit (LMF_NUM_THREADS=",
        loaded.state.threads(), " for that)"));
  }
  start_step_ = loaded.state.step();
  tokens_ = loaded.state.tokens();
  train_seconds_ = loaded.state.train_seconds();
  result_.last_checkpoint = loaded.path;
  result_.steps = start_step_;
  result_.last_loss = loaded.state.last_loss();
  return absl::OkStatus();
}

// --resume: the newest good checkpoint of this run folder, if there is one.
absl::Status TrainingRun::ResumeFromNewest(bool* restored) {
  std::vector<std::string> skipped;
  absl::StatusOr<std::string> latest = LatestCheckpoint(checkpoints_, &skipped);
  for (const std::string& why : skipped) console_.Message(absl::StrCat("skipping damaged checkpoint: ", why));
  if (latest.status().code() == absl::StatusCode::kNotFound && !skipped.empty()) {
    // Starting over would overwrite the damaged folders and the metrics log: a run's progress lost
    // without a word. Damage a kill cannot cause (saves are staged and renamed) needs the user.
    return absl::DataLossError(absl::StrCat("--resume: every checkpoint in ", checkpoints_, " is damaged (",
                                            absl::StrJoin(skipped, "; "),
                                            "); repair or move them aside to start the run over"));
  }
  if (latest.status().code() == absl::StatusCode::kNotFound) {
    console_.Message(absl::StrCat("--resume: no checkpoint in ", checkpoints_, "; starting ",
                                  run_.init_from().empty() ? "from scratch" : "from run.init_from"));
    return absl::OkStatus();
  }
  if (!latest.ok()) return latest.status();
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(*latest);
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<config::Experiment> then =
      config::ParseStoredExperiment(loaded->config_text, *latest + "/config.textproto");
  if (!then.ok()) return then.status();
  if (absl::Status s = CheckResumable(experiment_, *then, *latest, "resume from "); !s.ok()) return s;
  if (absl::Status s = CheckSameData(loaded->state, fingerprints_, *sampler_, "resume from " + *latest); !s.ok())
    return s;
  if (loaded->state.step() > total_steps_) {  // before this config replaces the run's
    return absl::InvalidArgumentError(absl::StrCat(
        "--resume: ", *latest, " is at step ", loaded->state.step(), ", past this config's end at step ",
        total_steps_, " (run.max_steps / run.max_tokens); a resumed run can only go on"));
  }
  if (absl::Status s = Restore(*loaded); !s.ok()) return s;
  *restored = true;
  console_.Message(start_step_ == total_steps_
                       ? absl::StrCat(*latest, " is the run's last step (", start_step_,
                                      "): already finished, nothing to train")
                       : absl::StrCat("resuming from ", *latest, " (step ", start_step_, ")"));
  if (lead_) {
    // The damaged folders after the resumed step are not this run's future: set aside, with a word.
    absl::StatusOr<std::vector<std::string>> moved = MoveAsideDamagedCheckpoints(checkpoints_, start_step_);
    if (!moved.ok()) return moved.status();
    for (const std::string& to : *moved) {
      console_.Message(absl::StrCat("moved the damaged checkpoint after step ", start_step_, " to ", to));
    }
  }
  return absl::OkStatus();
}

// run.init_from: a new run that takes over another run's steps up to its checkpoint.
absl::Status TrainingRun::StartFrom(const std::string& from) {
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
  if (then->model().has_ffn() && experiment_.model().has_moe()) {
    if (parallel_->pipelined()) {
      return absl::UnimplementedError(absl::StrCat("run.init_from=", from,
                                                   ": upcycling into model.moe is not "
                                                   "built for run.parallel.pipeline > 1"));
    }
    // Sparse upcycling: a new run from step 0 whose experts start as copies of the dense FFN.
    if (absl::Status s = CheckUpcycle(experiment_, *then, from); !s.ok()) return s;
    if (absl::Status s = LoadUpcycledWeights(loaded->model, *model_); !s.ok()) return s;
    console_.Message(absl::StrCat("upcycling ", from, " (step ", loaded->state.step(),
                                  "): each expert starts as its dense FFN; the router, the shared experts, the "
                                  "optimizer and the data stream start fresh (run.init_from)"));
    return absl::OkStatus();
  }
  if (absl::Status s = CheckResumable(experiment_, *then, from, "start from run.init_from="); !s.ok()) return s;
  if (loaded->state.step() >= total_steps_) {
    return absl::InvalidArgumentError(absl::StrCat("run.init_from=", from, " is at step ", loaded->state.step(),
                                                   ", not before this run's end at step ", total_steps_));
  }
  if (absl::Status s = CheckBranch(experiment_, *then, from, loaded->state.step()); !s.ok()) return s;
  if (absl::Status s = CheckSameData(loaded->state, fingerprints_, *sampler_, "start from run.init_from=" + from);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Restore(*loaded); !s.ok()) return s;
  console_.Message(absl::StrCat("starting from ", from, " (step ", start_step_, "; run.init_from)"));
  return absl::OkStatus();
}

// Where the run starts: a checkpoint of its own (--resume), another run's (run.init_from), or step 0; then
// the data-parallel ranks take rank 0's weights.
absl::Status TrainingRun::Continue() {
  bool restored = false;
  if (options_.resume) {
    if (absl::Status s = ResumeFromNewest(&restored); !s.ok()) return s;
  }
  if (!restored && !run_.init_from().empty()) {
    if (absl::Status s = StartFrom(run_.init_from()); !s.ok()) return s;
  }
  for (const int64_t step : pinned_) {
    if (lead_ && step <= start_step_ && !FileExists(CheckpointPath(checkpoints_, step))) {
      console_.Message(absl::StrCat("run.checkpoint_steps: step ", step,
                                    " is not written: this run starts after step ", start_step_));
    }
  }
  if (group_ != nullptr) {
    if (absl::Status s = strategy_->SyncParameters(*model_); !s.ok()) return CollectiveError(s);
    const int64_t accum = run_.grad_accum_steps();
    const int64_t first = strategy_->first_micro_batch(accum);
    const std::string where = parallel_->Where();
    console_.Message(absl::StrCat(where, ", micro-batches ", first + 1, "-",
                                  first + strategy_->micro_batch_count(accum), " of each step's ", accum,
                                  lead_ ? "; the other ranks log to rank_<r>.log" : ""));
    if (const std::string zero = parallel_->OptimizerShare(chunks_, optimizers_); !zero.empty()) console_.Message(zero);
  }
  return absl::OkStatus();
}

// The resolved config, metrics.jsonl and the TensorBoard events, written by rank 0.
absl::Status TrainingRun::OpenLogs() {
  config_text_ = config::ExperimentToText(experiment_);
  if (!lead_) return absl::OkStatus();
  if (absl::Status s = WriteFileAtomically(out_ + "/config.textproto", config_text_); !s.ok()) return s;
  // A continuation (a resume, a branch) takes the run's log up to its first step: the lines a killed run
  // wrote past that checkpoint are not this run's, even where this continuation does not log
  // (logging.metrics_jsonl: false), which would otherwise leave them for the sweep's curve to read.
  const std::optional<int64_t> continues_after =
      start_step_ > 0 || options_.resume ? std::optional<int64_t>(start_step_) : std::nullopt;
  if (experiment_.logging().metrics_jsonl()) {
    absl::StatusOr<MetricsLog> log = MetricsLog::Open(metrics_path_, continues_after);
    if (!log.ok()) return log.status();
    metrics_ = *std::move(log);
  } else if (continues_after.has_value()) {
    if (absl::Status s = DropMetricsAfterStep(metrics_path_, *continues_after); !s.ok()) return s;
  }
  // A new event file only where this process will log to it: resuming a finished run trains nothing, and
  // each empty file would be one more run in TensorBoard's list.
  if (experiment_.logging().tensorboard() && start_step_ < total_steps_) {
    absl::StatusOr<TensorBoardWriter> writer = TensorBoardWriter::Create(out_);
    if (!writer.ok()) return writer.status();
    events_ = *std::move(writer);
    if (options_.resume) {
      if (absl::Status s = events_->WriteRestart(start_step_ + 1); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// run.op_profile_steps: steps [profile_first_, profile_end_) are profiled, from the second step this
// process trains (skipping the first one's allocations and GEMM plans; the first when it trains only one).
// The table of time per op goes to op_profile.txt after the last.
absl::Status TrainingRun::StartOpProfile(int64_t step) {
  if (step != profile_first_ || profile_end_ <= profile_first_) return absl::OkStatus();
  return device_->StartOpProfile();
}

absl::Status TrainingRun::FinishOpProfile(int64_t completed) {
  if (completed != profile_end_ || profile_end_ <= profile_first_) return absl::OkStatus();
  const int profiled = static_cast<int>(profile_end_ - profile_first_);
  absl::StatusOr<TrainingDevice::OpProfileReport> report = device_->FinishOpProfile(profiled);
  if (!report.ok()) return report.status();
  const std::string path = out_ + "/op_profile.txt";
  const std::string text = absl::StrCat("# time per op and step, steps ", profile_first_ + 1, "-", profile_end_,
                                        " on ", device_->name(), "\n# ", report->method, "\n", report->table);
  if (lead_) {
    if (absl::Status s = WriteFileAtomically(path, text); !s.ok()) return s;
  }
  console_.Message(absl::StrCat("op profile of steps ", profile_first_ + 1, "-", profile_end_, ": ", path,
                                " (largest: ", report->largest, ")"));
  return absl::OkStatus();
}

// The validation loss after step `completed` where the config asks for one, into m.val_loss. Data
// parallel: each rank evaluates every world-th batch; the losses are summed in batch order.
absl::Status TrainingRun::Evaluate(int64_t completed, StepMetrics& m) {
  const bool due = completed == total_steps_ || (run_.eval_interval() > 0 && completed % run_.eval_interval() == 0) ||
                   std::find(run_.eval_steps().begin(), run_.eval_steps().end(), completed) != run_.eval_steps().end();
  if (!validation_.has_value() || !due) return absl::OkStatus();
  absl::StatusOr<std::vector<double>> losses = parallel_->ValidationShare(
      *model_, *validation_, run_.batch_size(), experiment_.model().context_length());
  if (!losses.ok()) return group_ != nullptr ? CollectiveError(losses.status()) : losses.status();
  if (absl::Status s = strategy_->SumOverProcesses(*losses); !s.ok()) return CollectiveError(s);
  m.val_loss = MeanInOrder(*losses);
  result_.last_val_loss = m.val_loss;
  return absl::OkStatus();
}

// One step's line in metrics.jsonl, TensorBoard and the console.
absl::Status TrainingRun::Log(const StepMetrics& m, int64_t step) {
  if (metrics_.has_value()) {
    if (absl::Status s = metrics_->Append(m); !s.ok()) return s;
  }
  if (events_.has_value()) {
    std::vector<std::pair<std::string, double>> scalars = {
        {"train/loss", m.loss}, {"train/lr", m.lr}, {"train/grad_norm", m.grad_norm},
        {"perf/tokens_per_second", m.tokens_per_second}, {"perf/mfu", m.mfu}};
    if (m.val_loss.has_value()) scalars.push_back({"val/loss", *m.val_loss});
    if (m.z_loss.has_value()) scalars.push_back({"train/z_loss", *m.z_loss});
    if (m.aux_loss.has_value()) scalars.push_back({"train/aux_loss", *m.aux_loss});
    if (m.expert_load_max_over_mean.has_value()) {
      scalars.push_back({"moe/expert_load_max_over_mean", *m.expert_load_max_over_mean});
    }
    if (m.dropped_share.has_value()) scalars.push_back({"moe/dropped_share", *m.dropped_share});
    if (m.noise_trace.has_value()) {
      // B_simple from exponential moving averages of its two parts (one step's ratio is too noisy to plot).
      noise_trace_ema_ = 0.99 * noise_trace_ema_ + 0.01 * *m.noise_trace;
      noise_grad_sq_ema_ = 0.99 * noise_grad_sq_ema_ + 0.01 * *m.noise_grad_sq;
      if (noise_grad_sq_ema_ > 0) {
        scalars.push_back({"train/gradient_noise_scale", noise_trace_ema_ / noise_grad_sq_ema_});
      }
    }
    if (absl::Status s = events_->WriteScalars(m.step, scalars); !s.ok()) return s;
    if (!m.expert_loads.empty()) {  // "moe/expert_load/layers.1.ffn": tokens per expert
      std::vector<std::pair<std::string, std::vector<double>>> histograms;
      for (const auto& [layer, loads] : m.expert_loads) histograms.emplace_back("moe/expert_load/" + layer, loads);
      if (absl::Status s = events_->WriteIndexHistograms(m.step, histograms); !s.ok()) return s;
    }
  }
  if (bar_ || m.step == total_steps_ || m.step % experiment_.logging().log_interval() == 0 || step == start_step_) {
    console_.Step(m);
  }
  if (m.val_loss.has_value()) {
    console_.Message(absl::StrFormat("eval step %d | val loss %.4f | val ppl %.2f", m.step, *m.val_loss,
                                     std::exp(*m.val_loss)));
  }
  return absl::OkStatus();
}

// A checkpoint after step `completed`, written by rank 0: weights, optimizer state, data position and
// counters. Every rank calls it: the ranks send rank 0 their slices, shards and expert blocks
// (RunParallelism::GatherCheckpoint).
absl::Status TrainingRun::SaveCheckpoint(int64_t completed, double loss) {
  HostTensors weights, optimizer_state;
  if (absl::Status s = parallel_->GatherCheckpoint(chunks_, optimizers_, &weights, &optimizer_state); !s.ok()) {
    return CollectiveError(s);
  }
  if (!lead_) return absl::OkStatus();
  CheckpointContents contents;
  contents.model = weights.tensors;
  contents.optimizer = optimizer_state.tensors;
  contents.state.set_step(completed);
  contents.state.set_tokens(tokens_);
  contents.state.set_sampler_seed(sampler_->state().seed);
  contents.state.set_sampler_windows_drawn(sampler_->state().windows_drawn);
  contents.state.set_optimizer_step(optimizer_->step());
  contents.state.set_last_loss(loss);
  contents.state.set_train_seconds(train_seconds_);
  contents.state.set_tokenizer_hash(sampler_->tokenizer_hash());
  if (run_.device() == config::RunConfig::CPU) contents.state.set_threads(device_->context().num_threads());
  for (size_t i = 0; i < fingerprints_.size(); ++i) {
    checkpoint::DataFingerprint* f = contents.state.add_train_data();
    f->set_path(sources_[i].path);
    f->set_num_tokens(sampler_->files()[i].size());
    f->set_crc32c(fingerprints_[i]);
  }
  contents.config_text = config_text_;
  absl::StatusOr<std::string> saved = lmf::experiments::SaveCheckpoint(checkpoints_, contents,
                                                                       run_.keep_checkpoints(), pinned_);
  if (!saved.ok()) return saved.status();
  result_.last_checkpoint = *saved;
  console_.Message(absl::StrCat("checkpoint ", *saved));
  return absl::OkStatus();
}

// The steps from start_step_ to the end: each computes its gradients through the step strategy, updates,
// evaluates, logs and checkpoints where due, and stops after a signal with a checkpoint.
absl::StatusOr<TrainResult> TrainingRun::TrainSteps(const StopSignals& signals) {
  const kernels::Context& ctx = device_->context();
  const int64_t tokens_per_step = config::TokensPerStep(experiment_);
  const LrSchedule schedule(experiment_.schedule(), experiment_.optimizer().lr(), total_steps_, tokens_per_step);
  const double flops_per_token =
      model::CountFlopsPerToken(model_config_, experiment_.model().context_length()).training();
  SamplerSource source(*sampler_);
  profile_first_ = std::min(start_step_ + 1, total_steps_ - 1);
  profile_end_ = run_.op_profile_steps() > 0 ? std::min(total_steps_, profile_first_ + run_.op_profile_steps())
                                             : profile_first_;
  for (int64_t step = start_step_; step < total_steps_; ++step) {
    if (absl::Status s = StartOpProfile(step); !s.ok()) return s;
    const Clock::time_point started = Clock::now();
    model::StepInput step_input;
    step_input.micro_batches = run_.grad_accum_steps();
    step_input.b = run_.batch_size();
    step_input.t = experiment_.model().context_length();
    step_input.lr = schedule.At(step);
    step_input.seed = run_.seed();
    step_input.step = step;
    step_input.received_signal = [&signals] { return signals.received(); };
    absl::StatusOr<model::StepResult> stepped = strategy_->Step(*model_, optimizer_->adamw(), source, step_input);
    if (!stepped.ok()) return group_ != nullptr ? CollectiveError(stepped.status()) : stepped.status();
    const double loss = stepped->loss, grad_norm = stepped->grad_norm;
    const int64_t completed = step + 1;
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      const std::string message = absl::StrCat(
          "step ", completed, ": ", std::isfinite(loss) ? "gradient norm" : "loss", " is ",
          std::isfinite(loss) ? grad_norm : loss, "; stopping before the update. Last good checkpoint: ",
          result_.last_checkpoint.empty() ? "none written yet" : result_.last_checkpoint);
      console_.Message(message);
      console_.Finish();
      return absl::AbortedError(message);
    }
    tokens_ += tokens_per_step;
    kernels::Synchronize(ctx);  // the update is queued on a GPU's stream; the step ends when it is done
    const double step_seconds = Seconds(started);
    train_seconds_ += step_seconds;
    if (absl::Status s = FinishOpProfile(completed); !s.ok()) return s;

    StepMetrics m;
    m.step = completed;
    m.tokens = tokens_;
    m.loss = loss;
    m.lr = step_input.lr;
    m.grad_norm = grad_norm;
    m.tokens_per_second = static_cast<double>(tokens_per_step) / step_seconds;
    m.mfu = peak_flops_.has_value() ? m.tokens_per_second * flops_per_token / *peak_flops_ : 0.0;
    m.wall_seconds = train_seconds_;
    if (model_->config().z_loss > 0) m.z_loss = stepped->z_loss;
    if (std::isfinite(stepped->noise_trace) && std::isfinite(stepped->noise_grad_sq)) {
      m.noise_trace = stepped->noise_trace;
      m.noise_grad_sq = stepped->noise_grad_sq;
    }
    if (HasMoeLayers(model_config_)) {
      m.aux_loss = stepped->aux_loss;
      m.expert_load_max_over_mean = stepped->expert_load_max_over_mean;
      m.dropped_share = stepped->dropped_share;
      m.expert_loads = stepped->expert_loads;
    }
    const bool last = completed == total_steps_;
    const bool checkpoint_step =
        last || (run_.checkpoint_interval() > 0 && completed % run_.checkpoint_interval() == 0) ||
        std::find(pinned_.begin(), pinned_.end(), completed) != pinned_.end();
    if (group_ != nullptr && checkpoint_step) {
      // The ranks' copies of the weights must be one.
      if (absl::Status s = strategy_->CheckReplicasAgree(*model_, completed); !s.ok()) {
        return s.code() == absl::StatusCode::kInternal ? s : CollectiveError(s);
      }
    }
    if (absl::Status s = Evaluate(completed, m); !s.ok()) return s;
    result_.steps = completed;
    result_.last_loss = loss;
    if (absl::Status s = Log(m, step); !s.ok()) return s;
    if (options_.stop_after_step == completed) return result_;

    // Data parallel: the signal was agreed on at the step's all-reduce.
    const int stop_signal = group_ == nullptr ? signals.received() : stepped->stop_signal;
    if (checkpoint_step || stop_signal != 0) {
      if (absl::Status s = SaveCheckpoint(completed, loss); !s.ok()) return s;
    }
    if (stop_signal != 0 && !last) {
      console_.Finish();
      return absl::CancelledError(absl::StrCat(
          "stopped by signal ", stop_signal, " after step ", completed,
          lead_ ? absl::StrCat("; checkpoint ", result_.last_checkpoint) : "; rank 0 writes the checkpoint",
          "; ", options_.how_to_continue));
    }
  }
  console_.Finish();
  if (launch_ != nullptr) {
    if (absl::Status s = launch_->Wait(); !s.ok()) return s;
  }
  return result_;
}

}  // namespace

absl::StatusOr<TrainResult> Train(const config::Experiment& experiment, const TrainOptions& options) {
  // First, so that a SIGINT or SIGTERM while the run starts (opening data, building or loading the model)
  // stops it after its first step with a checkpoint, as one during training does, instead of killing it.
  const StopSignals signals(options.checkpoint_on_signal);
  TrainingRun run(experiment, options);
  for (absl::Status (TrainingRun::*step)() :
       {&TrainingRun::OpenRunFolder, &TrainingRun::StartRanks, &TrainingRun::BuildModel, &TrainingRun::OpenData}) {
    if (absl::Status s = (run.*step)(); !s.ok()) return s;
  }
  run.Announce();
  if (absl::Status s = run.Continue(); !s.ok()) return s;
  if (absl::Status s = run.OpenLogs(); !s.ok()) return s;
  return run.TrainSteps(signals);
}

}  // namespace lmf::experiments
