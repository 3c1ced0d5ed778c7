// Initialisation and muP learning-rate scales by parameter kind (model/layers/parameter.h), for every scheme
// of ModelConfig::init. A layer declares what each of its parameters is; nothing here reads a name except to
// seed that parameter's own random stream.
//   kGpt2Scaled  matrices and embeddings N(0, init_std); kResidualMatrix also / sqrt(2 n_layers)
//   kMup         kGpt2Scaled with width multiplier m: kMatrix and kResidualMatrix / sqrt(m), kOutputMatrix / m
//   kCs336TruncatedNormal  embeddings N(0, 1) cut at 3; matrices std sqrt(2 / (OUT + IN)) cut at 3 std (a
//                          tied token table is the LM head's matrix: TokenTableKind in embedding.h)
// Biases start at 0 and gains at 1 in every scheme.
#ifndef LMFORGE_MODEL_LANGUAGE_MODEL_INIT_H_
#define LMFORGE_MODEL_LANGUAGE_MODEL_INIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "model/config/config.h"
#include "model/layers/parameter.h"

namespace lmf::model {

// The initial values of parameter `name` (its shape and kind from `p`) into `values` (resized), drawn from a
// stream seeded by (seed, name): the same on every device, in any visiting order, in any stage slice.
void DrawInitialValues(const ModelConfig& config, uint64_t seed, const std::string& name, const Parameter& p,
                       std::vector<float>& values);

// muP's factor on the learning rate of a parameter of `kind` (1 / m for matrices and the output layer under
// kMup; else 1).
double LearningRateScale(const ModelConfig& config, ParameterKind kind);

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LANGUAGE_MODEL_INIT_H_
