// Command-line overrides of config fields: `--set=optimizer.lr=3e-4` assigns one scalar or enum field,
// found by its path of field names from the top message. Sub-messages on the path are created (and a
// oneof switches to the named member). Errors name the assignment and what was expected.
#ifndef LMFORGE_CONFIG_OVERRIDES_H_
#define LMFORGE_CONFIG_OVERRIDES_H_

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace lmf::config {

// `assignment` is "path.to.field=value". Integers, floating point (3e-4, inf is rejected), booleans
// (true/false/1/0), strings (taken verbatim) and enums (by value name) are accepted. A repeated field of
// numbers, booleans or enums takes a comma-separated list that replaces its values ("" clears it).
absl::Status ApplyOverride(const std::string& assignment, google::protobuf::Message* message);

}  // namespace lmf::config

#endif  // LMFORGE_CONFIG_OVERRIDES_H_
