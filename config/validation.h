// Validation of an experiment config: one function per message, each the only place that message's rules
// live. Every rule adds one message naming the field path and the reason, e.g.
//   model.n_heads=12 does not divide model.d_model=1000
// and the loader (loader.h) prefixes them with the config file's name; every problem of a file is reported
// at once. Rules that span messages (the schedule against the run length, evaluation against the data)
// live in ValidateExperiment.
#ifndef LMFORGE_CONFIG_VALIDATION_H_
#define LMFORGE_CONFIG_VALIDATION_H_

#include <string>

#include "absl/status/status.h"
#include "config/errors.h"
#include "config/experiment.pb.h"

namespace lmf::config {

// The rules of the model message are in model_conversion.h (ValidateModel): the model's own, named by
// their config paths, and the config's.
void ValidateOptimizer(const OptimizerConfig& optimizer, ConfigErrors* errors);
void ValidateSchedule(const ScheduleConfig& schedule, ConfigErrors* errors);
void ValidateData(const DataConfig& data, ConfigErrors* errors);
void ValidateRun(const RunConfig& run, ConfigErrors* errors);
// The part of ValidateRun on run.device and run.precision alone, for code that opens a device from a
// RunConfig (the trainer's TrainingDevice).
void ValidateDevice(const RunConfig& run, ConfigErrors* errors);
void ValidateLogging(const LoggingConfig& logging, ConfigErrors* errors);
// run.parallel against the model and the run: the pipeline's stages, schedule, chunks and stage_layers.
void ValidateParallel(const Experiment& experiment, ConfigErrors* errors);

// All of the above plus the rules that span messages. `source` names the config (usually its file).
absl::Status ValidateExperiment(const Experiment& experiment, const std::string& source);

}  // namespace lmf::config

#endif  // LMFORGE_CONFIG_VALIDATION_H_
