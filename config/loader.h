// Loading an experiment config: read the textproto, parse it (errors at file:line:column), apply --set
// overrides, validate (validation.h), then resolve defaults so that the config written into a run's output
// folder states every value the run used. The single entry point binaries use is LoadExperiment.
#ifndef LMFORGE_CONFIG_LOADER_H_
#define LMFORGE_CONFIG_LOADER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/experiment.pb.h"
#include "google/protobuf/message.h"

namespace lmf::config {

// Parses any message from text format; errors are InvalidArgument "<source>:<line>:<column>: <message>".
absl::Status ParseTextProto(std::string_view text, const std::string& source, google::protobuf::Message* message);

// Parses text format. An unknown field, a bad value or a syntax error is InvalidArgument
// "<source>:<line>:<column>: <parser message>" (1-based line and column).
absl::StatusOr<Experiment> ParseExperimentText(std::string_view text, const std::string& source);

// A config a run wrote (a run folder's or checkpoint's config.textproto): parsed and resolved, not validated
// again, so that it compares (ConfigDifference) with a resolved config of this build even where an older
// build wrote it without the fields added since.
absl::StatusOr<Experiment> ParseStoredExperiment(std::string_view text, const std::string& source);

// Parse, apply `overrides` ("path=value", in order), validate, resolve defaults. Errors name `source`.
absl::StatusOr<Experiment> LoadExperimentText(std::string_view text, const std::string& source,
                                                      const std::vector<std::string>& overrides);

// The same for a file; `path` names it in every error.
absl::StatusOr<Experiment> LoadExperiment(const std::string& path,
                                                  const std::vector<std::string>& overrides);

// Makes every field with an explicit [default] in the schema explicitly set, creates the optional
// sub-messages, picks the default member of oneofs left empty (causal attention, AdamW), and sets
// model.n_kv_heads to model.n_heads when absent. Idempotent.
void ResolveDefaults(Experiment* experiment);

// The first difference between two configs of one message type, as "modified: n_layers: 2 -> 3" (field
// paths from the messages given; "added:" / "deleted:" for a field set on one side only), or "" when they
// are equal. Pass resolved configs (ResolveDefaults): a config written by an older build lacks the fields
// added since, which resolving fills with their defaults, so it still compares equal.
std::string ConfigDifference(const google::protobuf::Message& before, const google::protobuf::Message& after);

// Text format of a config (what run folders and checkpoints store).
std::string ExperimentToText(const Experiment& experiment);

// Writes ExperimentToText atomically to `path`.
absl::Status WriteExperiment(const Experiment& experiment, const std::string& path);

// Makes data paths and run.output_dir absolute against `base_dir` (the folder the user started the
// command in); absolute paths are kept.
void MakePathsAbsolute(const std::string& base_dir, Experiment* experiment);

}  // namespace lmf::config

#endif  // LMFORGE_CONFIG_LOADER_H_
