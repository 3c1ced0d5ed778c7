// Loading trained models (see model_loading.h).
#include "experiments/model_loading.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "config/loader.h"
#include "config/model_conversion.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/checkpoint/safetensors.h"
#include "experiments/trainer/memory_check.h"
#include "experiments/trainer/weights.h"
#include "model/accounting/training_memory.h"

namespace lmf::experiments {

std::string PlacementFlags(const ModelPlacement& placement) {
  const char* precision = placement.precision == config::RunConfig::BF16 ? "bf16" : "fp32";
  if (placement.device != config::RunConfig::CUDA)
    return absl::StrCat("--device=cpu --precision=", precision);
  return absl::StrCat("--device=cuda --cuda_device=", placement.cuda_device, " --precision=", precision);
}

absl::StatusOr<LoadedModel> LoadModelFromWeights(const config::Experiment& experiment,
                                                 const std::string& weights,
                                                 const ModelPlacement& placement) {
  absl::StatusOr<model::ModelConfig> model_config = config::ToModelConfig(experiment.model());
  if (!model_config.ok()) return model_config.status();
  config::RunConfig run;
  run.set_device(placement.device);
  run.set_cuda_device(placement.cuda_device);
  run.set_precision(placement.precision);
  absl::StatusOr<std::unique_ptr<TrainingDevice>> device = TrainingDevice::Open(run);
  if (!device.ok()) {
    // TrainingDevice names the run's fields ("run.device=CUDA: ..."); here the flags set them.
    absl::string_view message = device.status().message();
    absl::ConsumePrefix(&message, "run.device=CUDA: ");
    return absl::Status(device.status().code(), absl::StrCat(PlacementFlags(placement), ": ", message));
  }
  if (placement.device == config::RunConfig::CPU) {
    const config::ModelConfig& m = experiment.model();
    const model::ModelMemory need =
        model::CountModelMemory(*model_config, (*device)->activations(), 0, /*training=*/false);
    if (absl::Status s = CheckFitsInMemory(
            need, 1, MemoryBytes(),
            absl::StrCat("the model of ", weights, " (model.n_layers=", m.n_layers(),
                         ", model.d_model=", m.d_model(), ", model.ffn.d_ff=", m.ffn().d_ff(),
                         ", model.vocab_size=", m.vocab_size(), ")"));
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::unique_ptr<model::LanguageModel>> model =
      model::LanguageModel::Create(*model_config, (*device)->context(), (*device)->activations());
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat(PlacementFlags(placement), ": ", model.status().message()));
  }
  absl::StatusOr<SafetensorsReader> reader = SafetensorsReader::Open(weights);
  if (!reader.ok()) return reader.status();
  if (absl::Status s = LoadWeights(*reader, **model); !s.ok()) return s;
  return LoadedModel{experiment, *std::move(device), *std::move(model), weights, std::nullopt, {}};
}

absl::StatusOr<LoadedModel> LoadModelFromCheckpoint(const std::string& path,
                                                    const ModelPlacement& placement) {
  std::string checkpoint = path;
  std::vector<std::string> skipped;
  if (!FileExists(path + "/trainer_state.textproto")) {
    // A checkpoint folder that lost its state file (a run folder may hold an exported model.safetensors too).
    if (FileExists(path + "/model.safetensors") && !FileExists(path + "/checkpoints")) {
      return absl::DataLossError(
          absl::StrCat(path,
                       ": a checkpoint folder without its trainer_state.textproto "
                       "(which records the files' checksums); for the weights alone use "
                       "eval --config=... --weights=",
                       path, "/model.safetensors"));
    }
    absl::StatusOr<std::string> latest =
        LatestCheckpoint(path + "/checkpoints", &skipped, CheckpointUse::kWeights);
    if (!latest.ok() && !absl::IsNotFound(latest.status())) return latest.status();  // unreadable, not absent
    if (!latest.ok()) {
      return absl::NotFoundError(
          absl::StrCat(path, " is neither a checkpoint folder nor a run folder with a good ", "checkpoint",
                       skipped.empty() ? "" : absl::StrCat(" (", skipped[0], ")")));
    }
    checkpoint = *latest;
  }
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(checkpoint, CheckpointUse::kWeights);
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<config::Experiment> experiment =
      config::LoadExperimentText(loaded->config_text, checkpoint + "/config.textproto", {});
  if (!experiment.ok()) return experiment.status();
  absl::StatusOr<LoadedModel> model =
      LoadModelFromWeights(*experiment, checkpoint + "/model.safetensors", placement);
  if (model.ok() && loaded->state.has_tokenizer_hash())
    model->tokenizer_hash = loaded->state.tokenizer_hash();
  if (model.ok()) model->skipped_checkpoints = std::move(skipped);
  return model;
}

}  // namespace lmf::experiments
