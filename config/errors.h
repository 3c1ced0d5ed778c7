// ConfigErrors: the problems found in one config, collected so that a file's every problem is reported at
// once, each on its own line naming the field path and the reason (validation.h, model_conversion.h); and
// the rules that many fields share, each adding its one message shape: the field path, "=", the value as
// written, then what is wrong ("run.max_steps=0 must be positive").
#ifndef LMFORGE_CONFIG_ERRORS_H_
#define LMFORGE_CONFIG_ERRORS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace lmf::config {

// The problems found in one config, in the order the rules ran.
class ConfigErrors {
 public:
  void Add(std::string message) { messages_.push_back(std::move(message)); }
  bool empty() const { return messages_.empty(); }
  const std::vector<std::string>& messages() const { return messages_; }
  // OK when empty; otherwise InvalidArgument with one line per problem, each "<source>: <message>" (just
  // "<message>" when `source` is empty).
  absl::Status ToStatus(const std::string& source) const;

 private:
  std::vector<std::string> messages_;
};

// A required positive integer: "is required" when absent, "must be positive" when <= 0.
void RequirePositive(bool present, int64_t value, const std::string& path, ConfigErrors* errors);

void RequireNonNegative(int64_t value, const std::string& path, ConfigErrors* errors);

// An enum explicitly set to its UNSPECIFIED value (the parser accepts it; nothing can use it).
template <typename Enum>
void RequireSpecified(Enum value, const std::string& path, ConfigErrors* errors) {
  if (static_cast<int>(value) == 0) errors->Add(path + " must not be an UNSPECIFIED value");
}

// In [0, 1] or [0, 1).
void RequireUnitInterval(double value, bool include_one, const std::string& path, ConfigErrors* errors);

// Positive as an fp32 number (what the kernels apply): not 0, inf or below FLT_MIN once rounded to fp32.
void RequirePositiveInFloat(double value, const std::string& path, ConfigErrors* errors);

}  // namespace lmf::config

#endif  // LMFORGE_CONFIG_ERRORS_H_
