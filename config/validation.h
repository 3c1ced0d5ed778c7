// Validation of an experiment config: one function per message, each the only place that message's rules
// live. Every rule adds one message naming the field path and the reason, e.g.
//   model.n_heads=12 does not divide model.d_model=1000
// and the loader (loader.h) prefixes them with the config file's name. Rules that span messages (the
// schedule against the run length, evaluation against the data) live in ValidateExperiment.
#ifndef LMFORGE_EXPERIMENTS_CONFIG_VALIDATION_H_
#define LMFORGE_EXPERIMENTS_CONFIG_VALIDATION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "experiments/proto/experiment.pb.h"

namespace lmf::experiments {

// The problems found in one config, in the order the rules ran.
class ConfigErrors {
 public:
  void Add(std::string message) { messages_.push_back(std::move(message)); }
  bool empty() const { return messages_.empty(); }
  const std::vector<std::string>& messages() const { return messages_; }
  // OK when empty; otherwise InvalidArgument with one line per problem, each "<source>: <message>".
  absl::Status ToStatus(const std::string& source) const;

 private:
  std::vector<std::string> messages_;
};

void ValidateModel(const config::ModelConfig& model, ConfigErrors* errors);
void ValidateAttention(const config::AttentionConfig& attention, const config::ModelConfig& model,
                       ConfigErrors* errors);
void ValidateOptimizer(const config::OptimizerConfig& optimizer, ConfigErrors* errors);
void ValidateSchedule(const config::ScheduleConfig& schedule, ConfigErrors* errors);
void ValidateData(const config::DataConfig& data, ConfigErrors* errors);
void ValidateRun(const config::RunConfig& run, ConfigErrors* errors);
void ValidateLogging(const config::LoggingConfig& logging, ConfigErrors* errors);

// All of the above plus the rules that span messages. `source` names the config (usually its file).
absl::Status ValidateExperiment(const config::Experiment& experiment, const std::string& source);

// Tokens consumed by one optimizer step: batch_size * grad_accum_steps * context_length.
int64_t TokensPerStep(const config::Experiment& experiment);

// Optimizer steps the run takes: run.max_steps, or max_tokens / TokensPerStep rounded down.
int64_t TotalSteps(const config::Experiment& experiment);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_CONFIG_VALIDATION_H_
