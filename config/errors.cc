// ConfigErrors and the shared rules (see errors.h).
#include "config/errors.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lmf::config {

absl::Status ConfigErrors::ToStatus(const std::string& source) const {
  if (messages_.empty()) return absl::OkStatus();
  if (source.empty()) return absl::InvalidArgumentError(absl::StrJoin(messages_, "\n"));
  std::vector<std::string> lines;
  lines.reserve(messages_.size());
  for (const std::string& message : messages_) lines.push_back(absl::StrCat(source, ": ", message));
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

void RequirePositive(bool present, int64_t value, const std::string& path, ConfigErrors* errors) {
  if (!present) {
    errors->Add(absl::StrCat(path, " is required (a positive integer)"));
  } else if (value <= 0) {
    errors->Add(absl::StrCat(path, "=", value, " must be positive"));
  }
}

void RequireNonNegative(int64_t value, const std::string& path, ConfigErrors* errors) {
  if (value < 0) errors->Add(absl::StrCat(path, "=", value, " must not be negative"));
}

void RequireUnitInterval(double value, bool include_one, const std::string& path, ConfigErrors* errors) {
  const bool ok = value >= 0 && (include_one ? value <= 1 : value < 1);
  if (!ok) errors->Add(absl::StrCat(path, "=", value, " must be in [0, 1", include_one ? "]" : ")"));
}

void RequirePositiveInFloat(double value, const std::string& path, ConfigErrors* errors) {
  if (!(value > 0)) {
    errors->Add(absl::StrCat(path, "=", value, " must be positive"));
  } else if (!(static_cast<float>(value) >= std::numeric_limits<float>::min()) ||
             !std::isfinite(static_cast<float>(value))) {  // below FLT_MIN: subnormal, flushed to 0 on GPUs
    errors->Add(
        absl::StrCat(path, "=", value, " is not a positive fp32 number (the kernels apply it in fp32)"));
  }
}

}  // namespace lmf::config
