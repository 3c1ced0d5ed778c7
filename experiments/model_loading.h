// Building a LanguageModel with trained weights for the eval and generate binaries: from a checkpoint
// folder (or a run folder: its newest good checkpoint), or from a config plus a safetensors file of
// weights written elsewhere (e.g. by PyTorch under our parameter names, see README.md).
#ifndef LMFORGE_EXPERIMENTS_MODEL_LOADING_H_
#define LMFORGE_EXPERIMENTS_MODEL_LOADING_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "experiments/proto/experiment.pb.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {

struct LoadedModel {
  config::Experiment experiment;
  std::unique_ptr<model::LanguageModel> model;
  std::string weights_path;  // the safetensors file the weights came from
};

// `path` is a checkpoint folder (holding trainer_state.textproto) or a run folder (its checkpoints/).
absl::StatusOr<LoadedModel> LoadModelFromCheckpoint(const std::string& path);

// The model of `experiment` with the weights of a safetensors file.
absl::StatusOr<LoadedModel> LoadModelFromWeights(const config::Experiment& experiment, const std::string& weights);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_MODEL_LOADING_H_
