// Moving a LanguageModel's parameters in and out of safetensors by name: the names are the model's
// checkpoint names (model/language_model, documented in experiments/README.md), so weights written by
// PyTorch under the same names load here and ours load there.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_WEIGHTS_H_
#define LMFORGE_EXPERIMENTS_TRAINER_WEIGHTS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/checkpoint/safetensors.h"
#include "experiments/data/token_batches.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {

// Every parameter as (name, shape, data pointer into the model).
std::vector<NamedTensor> ModelTensors(const model::LanguageModel& model);

// Copies every parameter from `weights` (F32, BF16, F16 or F64). A missing tensor, a shape mismatch or a
// tensor the model does not have is an error naming it.
absl::Status LoadWeights(const SafetensorsReader& weights, model::LanguageModel& model);

// Mean cross-entropy over every batch of `batches` (each batch weighs the same: they all hold B x T
// targets).
absl::StatusOr<double> ValidationLoss(model::LanguageModel& model, const ValidationBatches& batches,
                                      int64_t batch_size, int64_t context_length);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_WEIGHTS_H_
