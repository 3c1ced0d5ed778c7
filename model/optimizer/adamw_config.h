// AdamW's hyperparameters and their rules, written once: the trainer's config validation
// (config/validation.cc) names the members by their config paths, AdamW by their own names.
#ifndef LMFORGE_MODEL_OPTIMIZER_ADAMW_CONFIG_H_
#define LMFORGE_MODEL_OPTIMIZER_ADAMW_CONFIG_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace lmf::model {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  // Also decay 1-D parameters (norm gains, biases); false decays matrices and embeddings only (nanoGPT).
  bool decay_vectors = false;
  double max_grad_norm = 1.0;  // 0 turns clipping off

  // One line per broken rule, "<name>=<value> <what is wrong>", each member named by `name` (null: its own
  // name, e.g. "beta1"); empty when the config can be used.
  std::vector<std::string> Problems(const std::function<std::string(std::string_view member)>& name = nullptr) const;
  // OK, or InvalidArgument "adamw: <problem>; <problem>".
  absl::Status Validate() const;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_OPTIMIZER_ADAMW_CONFIG_H_
