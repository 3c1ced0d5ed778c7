// The experiment config's model message (model.proto) and the model's plain struct (model/config/config.h):
// the conversion, and the model message's validation, which runs through it. The rules on the model's
// shape live once, in model::ModelConfig::Problems(); this file holds the rules only the config has (a
// required field absent, an enum left UNSPECIFIED, the feed-forward oneof unset, the fields of an attention
// variant) and the config path of each of the struct's members ("d_ff" is model.ffn.d_ff), so that the
// model's messages name the field as the user wrote it.
#ifndef LMFORGE_CONFIG_MODEL_CONVERSION_H_
#define LMFORGE_CONFIG_MODEL_CONVERSION_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "config/errors.h"
#include "config/model.pb.h"
#include "model/config/config.h"

namespace lmf::config {

// Adds every problem of the model message to `errors`: the config's own rules, then the model's rules on
// its conversion, e.g. "model.n_kv_heads=3 does not divide model.n_heads=4 (...)". A rule of the model on
// a field the config's rules reported (a required size left out) is not reported again.
void ValidateModel(const ModelConfig& model, ConfigErrors* errors);

// The model config of an experiment's model message. Errors: Unimplemented for a choice the model does not
// build yet (model.attention.mla), then InvalidArgument with every problem of ValidateModel, one per line.
absl::StatusOr<model::ModelConfig> ToModelConfig(const ModelConfig& proto);

// The experiment config's path of a member of model::ModelConfig: "d_ff" -> "model.ffn.d_ff",
// "n_heads" -> "model.n_heads".
std::string ModelConfigPath(std::string_view member);

}  // namespace lmf::config

#endif  // LMFORGE_CONFIG_MODEL_CONVERSION_H_
