// Loading trained models (see model_loading.h).
#include "experiments/model_loading.h"

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/checkpoint/safetensors.h"
#include "experiments/config/loader.h"
#include "experiments/trainer/model_spec.h"
#include "experiments/trainer/weights.h"
#include "kernels/core/context.h"

namespace lmf::experiments {

absl::StatusOr<LoadedModel> LoadModelFromWeights(const config::Experiment& experiment, const std::string& weights) {
  absl::StatusOr<model::ModelConfig> model_config = ToModelConfig(experiment.model());
  if (!model_config.ok()) return model_config.status();
  absl::StatusOr<std::unique_ptr<model::LanguageModel>> model =
      model::LanguageModel::Create(*model_config, kernels::Context::Cpu());
  if (!model.ok()) return model.status();
  absl::StatusOr<SafetensorsReader> reader = SafetensorsReader::Open(weights);
  if (!reader.ok()) return reader.status();
  if (absl::Status s = LoadWeights(*reader, **model); !s.ok()) return s;
  return LoadedModel{experiment, *std::move(model), weights};
}

absl::StatusOr<LoadedModel> LoadModelFromCheckpoint(const std::string& path) {
  std::string checkpoint = path;
  if (!FileExists(path + "/trainer_state.textproto")) {
    std::vector<std::string> skipped;
    absl::StatusOr<std::string> latest = LatestCheckpoint(path + "/checkpoints", &skipped);
    if (!latest.ok()) {
      return absl::NotFoundError(absl::StrCat(path, " is neither a checkpoint folder nor a run folder with a good ",
                                              "checkpoint", skipped.empty() ? "" : absl::StrCat(" (", skipped[0], ")")));
    }
    checkpoint = *latest;
  }
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(checkpoint);
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<config::Experiment> experiment =
      LoadExperimentText(loaded->config_text, checkpoint + "/config.textproto", {});
  if (!experiment.ok()) return experiment.status();
  return LoadModelFromWeights(*experiment, checkpoint + "/model.safetensors");
}

}  // namespace lmf::experiments
