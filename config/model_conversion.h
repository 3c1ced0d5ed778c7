// Conversion of the experiment's protobuf model config (experiments/proto/model.proto) into the model's
// plain lmf::model::ModelConfig, and of the optimizer config into the trainer's AdamW settings. Choices
// the schema has room for but the model does not build yet (multi-head latent attention) are rejected here
// with the field path, not silently dropped.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_MODEL_SPEC_H_
#define LMFORGE_EXPERIMENTS_TRAINER_MODEL_SPEC_H_

#include "absl/status/statusor.h"
#include "experiments/proto/model.pb.h"
#include "model/config/config.h"

namespace lmf::experiments {

// The model config of a validated (loader.h) experiment. Errors: "model.<field>: ..." for choices the
// model cannot build, then the model's own Validate() message.
absl::StatusOr<model::ModelConfig> ToModelConfig(const config::ModelConfig& proto);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_MODEL_SPEC_H_
