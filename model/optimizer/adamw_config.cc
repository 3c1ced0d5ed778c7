// AdamW's config rules (see adamw_config.h).
#include "model/optimizer/adamw_config.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lmf::model {

std::vector<std::string> AdamWConfig::Problems(const std::function<std::string(std::string_view)>& name) const {
  std::vector<std::string> problems;
  const auto say = [&](std::string_view member, double value, const char* what) {
    problems.push_back(absl::StrCat(name ? name(member) : std::string(member), "=", value, " ", what));
  };
  if (!(beta1 >= 0 && beta1 < 1)) say("beta1", beta1, "must be in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) say("beta2", beta2, "must be in [0, 1)");
  if (!(eps > 0)) {
    say("eps", eps, "must be positive");
  } else if (!(static_cast<float>(eps) >= std::numeric_limits<float>::min()) ||
             !std::isfinite(static_cast<float>(eps))) {  // below FLT_MIN: subnormal, flushed to 0 on GPUs
    say("eps", eps, "is not a positive fp32 number (the kernels apply it in fp32)");
  }
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) say("weight_decay", weight_decay, "must be a finite number >= 0");
  if (!(max_grad_norm >= 0) || !std::isfinite(max_grad_norm)) {
    say("max_grad_norm", max_grad_norm, "must be a finite number >= 0 (0 turns clipping off)");
  }
  return problems;
}

absl::Status AdamWConfig::Validate() const {
  const std::vector<std::string> problems = Problems();
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("adamw: ", absl::StrJoin(problems, "; ")));
}

}  // namespace lmf::model
