// The experiment config's optimizer message (optimizer.proto) as AdamW's plain config
// (model/optimizer/adamw_config.h), whose rules validation.cc reports under the config's field paths.
#ifndef LMFORGE_CONFIG_OPTIMIZER_CONVERSION_H_
#define LMFORGE_CONFIG_OPTIMIZER_CONVERSION_H_

#include <string>
#include <string_view>

#include "config/experiment.pb.h"
#include "model/optimizer/adamw_config.h"

namespace lmf::config {

model::AdamWConfig ToAdamWConfig(const OptimizerConfig& optimizer);

// The config path of an AdamWConfig member: "optimizer.adamw.beta1", "optimizer.grad_clip".
std::string AdamWConfigPath(std::string_view member);

}  // namespace lmf::config

#endif  // LMFORGE_CONFIG_OPTIMIZER_CONVERSION_H_
