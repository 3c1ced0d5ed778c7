// The rules of every config message (see validation.h). Messages follow one shape: the field path, "=",
// the value as written, then what is wrong, so a user can find the line in the textproto at a glance.
#include "config/validation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "config/model_conversion.h"
#include "config/optimizer_conversion.h"
#include "config/run_length.h"

namespace lmf::config {

void ValidateOptimizer(const OptimizerConfig& optimizer, ConfigErrors* errors) {
  if (!optimizer.has_lr()) {
    errors->Add("optimizer.lr is required (the peak learning rate)");
  } else if (!(optimizer.lr() > 0) || !std::isfinite(optimizer.lr())) {
    errors->Add(absl::StrCat("optimizer.lr=", optimizer.lr(), " must be positive and finite"));
  }
  for (std::string& problem : ToAdamWConfig(optimizer).Problems(AdamWConfigPath)) errors->Add(std::move(problem));
}

void ValidateSchedule(const ScheduleConfig& schedule, ConfigErrors* errors) {
  RequireSpecified(schedule.kind(), "schedule.kind", errors);
  RequireSpecified(schedule.unit(), "schedule.unit", errors);
  RequireNonNegative(schedule.warmup(), "schedule.warmup", errors);
  RequireNonNegative(schedule.decay_end(), "schedule.decay_end", errors);
  RequireUnitInterval(schedule.min_lr_ratio(), true, "schedule.min_lr_ratio", errors);
  if (schedule.kind() != ScheduleConfig::CONSTANT && schedule.decay_end() > 0 &&
      schedule.decay_end() <= schedule.warmup()) {
    errors->Add(absl::StrCat("schedule.decay_end=", schedule.decay_end(), " must be greater than schedule.warmup=",
                             schedule.warmup()));
  }
  // WSD's own fields (the other kinds ignore them, as CONSTANT ignores the floor; a resolved config holds
  // every default, so their presence says nothing).
  if (schedule.kind() == ScheduleConfig::WSD) {
    if (!(schedule.decay_fraction() > 0 && schedule.decay_fraction() <= 1)) {
      errors->Add(absl::StrCat("schedule.decay_fraction=", schedule.decay_fraction(), " must be in (0, 1]"));
    }
    RequireSpecified(schedule.decay_shape(), "schedule.decay_shape", errors);
  }
}

void ValidateData(const DataConfig& data, ConfigErrors* errors) {
  if (data.train_mixture_size() == 0 && data.train_tokens().empty()) {
    errors->Add("data.train_tokens is required (a token file from `bpe encode`), or data.train_mixture");
  }
  if (data.train_mixture_size() > 0 && !data.train_tokens().empty()) {
    errors->Add("data.train_tokens and data.train_mixture are alternatives: give one of them");
  }
  double total = 0;
  bool weights_ok = true;
  for (int i = 0; i < data.train_mixture_size(); ++i) {
    const TokenSource& source = data.train_mixture(i);
    if (source.path().empty()) errors->Add(absl::StrCat("data.train_mixture[", i, "].path is required"));
    if (!(source.weight() > 0) || !std::isfinite(source.weight())) {
      errors->Add(absl::StrCat("data.train_mixture[", i, "].weight=", source.weight(),
                               " must be a positive, finite number"));
      weights_ok = false;
    }
    total += source.weight();
  }
  if (weights_ok && !std::isfinite(total)) {
    errors->Add(
        "data.train_mixture's weights sum to infinity: give them on a smaller scale (only their ratios "
        "matter)");
  }
}

// run.parallel.expert on its own and with the other parallel fields (the model's side: ValidateExperiment).
void ValidateExpertParallel(const RunConfig& run, ConfigErrors* errors) {
  const int expert = run.parallel().expert(), data = run.parallel().data();
  if (expert < 1 || expert > 256) {
    errors->Add(absl::StrCat("run.parallel.expert=", expert, " must be 1 to 256 processes"));
    return;
  }
  if (expert == 1) return;
  if (data >= 1 && run.grad_accum_steps() % (data * expert) != 0) {
    errors->Add(absl::StrCat("run.grad_accum_steps=", run.grad_accum_steps(), " must be a multiple of run.parallel.data=",
                             data, " * run.parallel.expert=", expert,
                             " (every process takes an equal share of a step's micro-batches)"));
  }
}

void ValidateRun(const RunConfig& run, ConfigErrors* errors) {
  RequirePositive(run.has_batch_size(), run.batch_size(), "run.batch_size", errors);
  if (run.grad_accum_steps() < 1) {
    errors->Add(absl::StrCat("run.grad_accum_steps=", run.grad_accum_steps(), " must be at least 1"));
  }
  switch (run.length_case()) {
    case RunConfig::kMaxSteps:
      RequirePositive(true, run.max_steps(), "run.max_steps", errors);
      break;
    case RunConfig::kMaxTokens:
      RequirePositive(true, run.max_tokens(), "run.max_tokens", errors);
      break;
    case RunConfig::LENGTH_NOT_SET:
      errors->Add("run.max_steps or run.max_tokens is required (how long to train)");
      break;
  }
  RequireNonNegative(run.eval_interval(), "run.eval_interval", errors);
  RequireNonNegative(run.eval_tokens(), "run.eval_tokens", errors);
  RequireNonNegative(run.checkpoint_interval(), "run.checkpoint_interval", errors);
  if (run.keep_checkpoints() < 1) {
    errors->Add(absl::StrCat("run.keep_checkpoints=", run.keep_checkpoints(), " must be at least 1"));
  }
  if (run.output_dir().empty()) errors->Add("run.output_dir is required (the folder this run writes)");
  ValidateDevice(run, errors);
  if (run.parallel().data() < 1 || run.parallel().data() > 256) {
    errors->Add(absl::StrCat("run.parallel.data=", run.parallel().data(), " must be 1 to 256 processes"));
  } else if (run.parallel().data() > 1) {
    if (run.grad_accum_steps() % run.parallel().data() != 0) {
      errors->Add(absl::StrCat("run.grad_accum_steps=", run.grad_accum_steps(),
                               " must be a multiple of run.parallel.data=", run.parallel().data(),
                               " (each process takes an equal share of a step's micro-batches)"));
    }
  }
  ValidateExpertParallel(run, errors);
  if (run.parallel().zero_stage() != 0 && run.parallel().zero_stage() != 1) {
    errors->Add(absl::StrCat("run.parallel.zero_stage=", run.parallel().zero_stage(),
                             " must be 0 (off) or 1 (optimizer state sharded over the data-parallel replicas)"));
  }
  if (run.parallel().timeout_seconds() < 1) {
    errors->Add(absl::StrCat("run.parallel.timeout_seconds=", run.parallel().timeout_seconds(),
                             " must be at least 1"));
  }
  RequireNonNegative(run.op_profile_steps(), "run.op_profile_steps", errors);
  if (run.gemm_autotune() && run.device() == RunConfig::CPU) {
    errors->Add("run.gemm_autotune=true needs run.device=CUDA (it chooses among cuBLASLt's algorithms)");
  }
  // A peak under a megaFLOP/s is a unit slip (989.4 for 989.4e12) and one of 1e-300 made MFU infinite.
  if (run.peak_flops() != 0 && !(run.peak_flops() >= 1e6 && std::isfinite(run.peak_flops()))) {
    errors->Add(
        absl::StrCat("run.peak_flops=", run.peak_flops(),
                     " must be 0 (the measured CPU peak or the GPU's data-sheet rate) or a finite rate "
                     "of at least 1e6 FLOP/s"));
  }
}

void ValidateDevice(const RunConfig& run, ConfigErrors* errors) {
  RequireSpecified(run.device(), "run.device", errors);
  RequireSpecified(run.precision(), "run.precision", errors);
  RequireNonNegative(run.cuda_device(), "run.cuda_device", errors);
}

void ValidateLogging(const LoggingConfig& logging, ConfigErrors* errors) {
  if (logging.log_interval() < 1) {
    errors->Add(absl::StrCat("logging.log_interval=", logging.log_interval(), " must be at least 1"));
  }
  RequireSpecified(logging.progress_bar(), "logging.progress_bar", errors);
}

void ValidateParallel(const Experiment& experiment, ConfigErrors* errors) {
  const RunConfig& run = experiment.run();
  const ParallelConfig& parallel = run.parallel();
  const int pipeline = parallel.pipeline(), virtual_stages = parallel.virtual_stages();
  const std::string schedule =
      absl::StrCat("run.parallel.schedule=", ParallelConfig::Schedule_Name(parallel.schedule()));
  if (pipeline < 1 || pipeline > 256) {
    errors->Add(absl::StrCat("run.parallel.pipeline=", pipeline, " must be 1 to 256 stages"));
    return;
  }
  if (virtual_stages < 1) {
    errors->Add(absl::StrCat("run.parallel.virtual_stages=", virtual_stages, " must be at least 1"));
    return;
  }
  if (virtual_stages > 1 && parallel.schedule() != ParallelConfig::INTERLEAVED_1F1B) {
    errors->Add(absl::StrCat("run.parallel.virtual_stages=", virtual_stages,
                             " needs run.parallel.schedule="
                             "INTERLEAVED_1F1B (",
                             schedule, " runs one chunk of layers per process)"));
  }
  if (int64_t{parallel.data()} * pipeline > 256) {
    errors->Add(absl::StrCat("run.parallel.data=", parallel.data(), " x run.parallel.pipeline=", pipeline,
                             " processes: at most 256"));
  }
  const int64_t n_layers = experiment.model().n_layers(), stages = int64_t{pipeline} * virtual_stages;
  if (pipeline > 1 || virtual_stages > 1) {
    if (stages > n_layers) {
      errors->Add(absl::StrCat("run.parallel.pipeline=", pipeline,
                               " x run.parallel.virtual_stages=", virtual_stages,
                               " stages exceed model.n_layers=", n_layers, " (each stage needs a layer)"));
    }
    // Each pipeline (a data x expert replica of the stages) runs its share of the step's micro-batches.
    const int64_t data = std::max(1, parallel.data()), expert = std::max(1, parallel.expert());
    const int64_t micro_batches = run.grad_accum_steps() / (data * expert);
    if (parallel.schedule() == ParallelConfig::INTERLEAVED_1F1B && micro_batches % pipeline != 0) {
      errors->Add(absl::StrCat(schedule, " needs each pipeline's micro-batches (run.grad_accum_steps=",
                               run.grad_accum_steps(), " / run.parallel.data=", data,
                               expert > 1 ? absl::StrCat(" / run.parallel.expert=", expert) : "", " = ",
                               micro_batches, ") to be a multiple of run.parallel.pipeline=", pipeline));
    }
  }
  if (parallel.stage_layers_size() > 0) {
    int64_t sum = 0;
    for (int i = 0; i < parallel.stage_layers_size(); ++i) {
      if (parallel.stage_layers(i) < 1) {
        errors->Add(absl::StrCat("run.parallel.stage_layers[", i, "]=", parallel.stage_layers(i),
                                 " must be at least 1 (every stage needs a layer)"));
      }
      sum += parallel.stage_layers(i);
    }
    if (parallel.stage_layers_size() != stages) {
      errors->Add(absl::StrCat("run.parallel.stage_layers has ", parallel.stage_layers_size(),
                               " entries; run.parallel.pipeline=", pipeline,
                               " x run.parallel.virtual_stages=", virtual_stages, " needs ", stages));
    } else if (sum != n_layers) {
      errors->Add(
          absl::StrCat("run.parallel.stage_layers sums to ", sum, " layers, model.n_layers=", n_layers));
    }
  }
}

absl::Status ValidateExperiment(const Experiment& experiment, const std::string& source) {
  ConfigErrors errors;
  const char* required[] = {"model", "optimizer", "data", "run"};
  const bool present[] = {experiment.has_model(), experiment.has_optimizer(), experiment.has_data(),
                          experiment.has_run()};
  for (int i = 0; i < 4; ++i) {
    if (!present[i]) errors.Add(absl::StrCat(required[i], " is required"));
  }
  if (!errors.empty()) return errors.ToStatus(source);

  ValidateModel(experiment.model(), &errors);
  ValidateOptimizer(experiment.optimizer(), &errors);
  ValidateSchedule(experiment.schedule(), &errors);
  ValidateData(experiment.data(), &errors);
  ValidateRun(experiment.run(), &errors);
  ValidateParallel(experiment, &errors);
  ValidateLogging(experiment.logging(), &errors);
  if (!errors.empty()) return errors.ToStatus(source);

  // Rules across messages, on values each message has already accepted.
  const RunConfig& run = experiment.run();
  // B * A * T of three int32 fields can pass int64, which every count of tokens below is in.
  const unsigned __int128 step_tokens = static_cast<unsigned __int128>(run.batch_size()) *
                                        static_cast<unsigned>(run.grad_accum_steps()) *
                                        static_cast<unsigned>(experiment.model().context_length());
  if (step_tokens > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
    errors.Add(absl::StrCat("run.batch_size=", run.batch_size(),
                            " * run.grad_accum_steps=", run.grad_accum_steps(), " * model.context_length=",
                            experiment.model().context_length(), " tokens per step do not fit in 64 bits"));
    return errors.ToStatus(source);
  }
  const int64_t per_step = TokensPerStep(experiment);
  if (run.has_max_tokens() && run.max_tokens() < per_step) {
    errors.Add(absl::StrCat("run.max_tokens=", run.max_tokens(), " is less than one step of ", per_step,
                            " tokens (run.batch_size * run.grad_accum_steps * model.context_length)"));
  }
  // Lists of steps (run.checkpoint_steps, run.eval_steps): each a step of the run.
  const int64_t total_steps = TotalSteps(experiment);
  const auto require_steps = [&](const google::protobuf::RepeatedField<int64_t>& steps, const char* field) {
    for (int i = 0; i < steps.size(); ++i) {
      if (steps[i] < 1 || steps[i] > total_steps) {
        errors.Add(
            absl::StrCat(field, "[", i, "]=", steps[i], " must be a step of the run, 1 to ", total_steps));
      }
    }
  };
  require_steps(run.checkpoint_steps(), "run.checkpoint_steps");
  require_steps(run.eval_steps(), "run.eval_steps");
  if (run.eval_steps_size() > 0 && run.eval_tokens() <= 0) {
    errors.Add("run.eval_steps needs run.eval_tokens (how many validation tokens an evaluation reads)");
  }
  const int64_t batch_tokens = static_cast<int64_t>(run.batch_size()) * experiment.model().context_length();
  if (const int expert = run.parallel().expert(); expert > 1) {
    const config::ModelConfig& model = experiment.model();
    const bool pattern_moe = std::any_of(model.layer_pattern().begin(), model.layer_pattern().end(),
                                         [](const BlockConfig& block) { return block.has_moe(); });
    if (!model.has_moe() && !pattern_moe) {
      errors.Add(absl::StrCat("run.parallel.expert=", expert, " needs a mixture of experts (model.moe)"));
    }
    const auto require_divisible = [&](const MoeConfig& moe, const std::string& field) {
      if (moe.n_experts() > 0 && moe.n_experts() % expert != 0) {
        errors.Add(absl::StrCat(field, ".n_experts=", moe.n_experts(), " must be a multiple of run.parallel.expert=",
                                expert, " (each process holds an equal share of the experts)"));
      }
    };
    if (model.has_moe()) require_divisible(model.moe(), "model.moe");
    for (int i = 0; i < model.layer_pattern_size(); ++i) {
      if (model.layer_pattern(i).has_moe()) {
        require_divisible(model.layer_pattern(i).moe(), absl::StrCat("model.layer_pattern[", i, "].moe"));
      }
    }
    const int64_t processes = int64_t{expert} * run.parallel().data();
    if (run.eval_tokens() > 0 && batch_tokens > 0 && (run.eval_tokens() / batch_tokens) % processes != 0) {
      errors.Add(absl::StrCat("run.eval_tokens=", run.eval_tokens(), " gives ", run.eval_tokens() / batch_tokens,
                              " validation batches of ", batch_tokens,
                              " tokens, not a multiple of the run.parallel.data * run.parallel.expert=", processes,
                              " processes (each evaluates an equal share: its experts serve the others')"));
    }
  }
  if (run.eval_tokens() > 0 && experiment.data().val_tokens().empty()) {
    errors.Add(absl::StrCat("run.eval_tokens=", run.eval_tokens(), " needs data.val_tokens"));
  }
  if (run.eval_tokens() > 0 && run.eval_tokens() < batch_tokens) {
    errors.Add(absl::StrCat("run.eval_tokens=", run.eval_tokens(), " is less than one batch of ", batch_tokens,
                            " tokens (run.batch_size * model.context_length)"));
  }
  const ScheduleConfig& schedule = experiment.schedule();
  const bool in_tokens = schedule.unit() == ScheduleConfig::TOKENS;
  const int64_t run_length = in_tokens ? total_steps * per_step : total_steps;
  const char* unit = in_tokens ? "tokens" : "steps";
  if (schedule.warmup() > run_length) {
    errors.Add(absl::StrCat("schedule.warmup=", schedule.warmup(), " exceeds the run's length of ", run_length,
                            " ", unit));
  } else if (schedule.kind() == ScheduleConfig::WSD && schedule.decay_fraction() > 0 &&
             schedule.decay_fraction() <= 1) {
    const int64_t end = schedule.decay_end() > 0 ? schedule.decay_end() : run_length;
    const int64_t start = WsdDecayStart(schedule.warmup(), end, schedule.decay_fraction());
    // The decay's first step is at the peak (its progress is 0 there): a decay that takes under two steps
    // never lowers the learning rate.
    const int64_t two_steps = in_tokens ? 2 * per_step : 2;
    if (end - start < two_steps) {
      errors.Add(absl::StrCat("schedule.decay_fraction=", schedule.decay_fraction(),
                              " leaves WSD no decay: over ", end, " ", unit, " it would start at ", start,
                              " (after schedule.warmup=", schedule.warmup(), ") and end at ", end,
                              ", under the two steps it takes to leave the peak"));
    }
  }
  return errors.ToStatus(source);
}

}  // namespace lmf::config
