// Building a LanguageModel with trained weights for the eval and generate binaries: from a checkpoint
// folder (or a run folder: its newest good checkpoint), or from a config plus a safetensors file of
// weights written elsewhere (e.g. by PyTorch under our parameter names, see README.md), on the CPU or on a
// CUDA device in fp32 or bf16 (a ModelPlacement, from the flags of experiments/placement_flags.h; the
// device is opened by the trainer's TrainingDevice).
#ifndef LMFORGE_EXPERIMENTS_MODEL_LOADING_H_
#define LMFORGE_EXPERIMENTS_MODEL_LOADING_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/experiment.pb.h"
#include "config/run.pb.h"
#include "experiments/trainer/training_device.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {

// Where a loaded model runs: the run.device, run.cuda_device and run.precision a trainer would read.
struct ModelPlacement {
  config::RunConfig::Device device = config::RunConfig::CPU;
  int32_t cuda_device = 0;
  config::RunConfig::Precision precision = config::RunConfig::FP32;
};

// The flags that give `placement`, e.g. "--device=cuda --cuda_device=0 --precision=bf16" (for messages).
std::string PlacementFlags(const ModelPlacement& placement);

struct LoadedModel {
  config::Experiment experiment;
  // The device the model lives on; declared before `model` so that the model is destroyed first.
  std::unique_ptr<TrainingDevice> device;
  std::unique_ptr<model::LanguageModel> model;
  std::string weights_path;  // the safetensors file the weights came from
  // From a checkpoint: the hash of the tokenizer whose ids the model was trained on (trainer_state.proto).
  std::optional<uint64_t> tokenizer_hash;
  // From a run folder: its newer checkpoints that failed verification and were passed over, each with why
  // (the binaries print them, so a fallback to an older checkpoint is never silent).
  std::vector<std::string> skipped_checkpoints;
};

// `path` is a checkpoint folder (holding trainer_state.textproto) or a run folder (its newest checkpoint
// whose weights and config verify: optimizer.safetensors is neither needed nor read,
// CheckpointUse::kWeights). Besides the checkpoint's errors: the device errors of TrainingDevice::Open (a
// CUDA device in a binary without the CUDA backend, a device that cannot be opened, with the CUDA error),
// prefixed by the placement's flags; and the model's (e.g. a head size the CUDA attention does not run).
absl::StatusOr<LoadedModel> LoadModelFromCheckpoint(const std::string& path,
                                                    const ModelPlacement& placement = {});

// The model of `experiment` with the weights of a safetensors file, on `placement`.
absl::StatusOr<LoadedModel> LoadModelFromWeights(const config::Experiment& experiment,
                                                 const std::string& weights,
                                                 const ModelPlacement& placement = {});

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_MODEL_LOADING_H_
