// Sums and prints per-op device times (see op_profile.h).
#include "kernels/profile/op_profile.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"

namespace lmf::kernels {

std::vector<OpTime> SumOpTimes(const std::vector<const char*>& names, const std::vector<double>& ms) {
  LMF_CHECK_EQ(names.size(), ms.size());
  std::map<std::string, OpTime> by_name;
  for (size_t i = 0; i < names.size(); ++i) {
    OpTime& entry = by_name[names[i]];
    entry.op = names[i];
    ++entry.calls;
    entry.total_ms += ms[i];
  }
  std::vector<OpTime> ops;
  for (auto& [name, entry] : by_name) ops.push_back(std::move(entry));
  std::stable_sort(ops.begin(), ops.end(),
                   [](const OpTime& a, const OpTime& b) { return a.total_ms > b.total_ms; });
  return ops;
}

namespace {
// Percent of the profile's window that `ms` is (0 for an empty window).
double Share(const OpProfile& profile, double ms) {
  return profile.window_ms > 0 ? 100 * ms / profile.window_ms : 0.0;
}
}  // namespace

std::string FormatOpProfile(const OpProfile& profile, int steps) {
  const double per = 1.0 / std::max(steps, 1);
  std::string out = absl::StrFormat("%-28s %10s %10s %7s\n", "op", "calls/step", "ms/step", "share");
  for (const OpTime& op : profile.ops) {
    absl::StrAppend(&out, absl::StrFormat("%-28s %10.1f %10.3f %6.1f%%\n", op.op, op.calls * per,
                                          op.total_ms * per, Share(profile, op.total_ms)));
  }
  absl::StrAppend(&out,
                  absl::StrFormat("%-28s %10s %10.3f %6.1f%%\n", "(outside the ops)", "",
                                  profile.outside_ops_ms * per, Share(profile, profile.outside_ops_ms)));
  absl::StrAppend(&out, absl::StrFormat("%-28s %10s %10.3f %6.1f%%\n", "window", "", profile.window_ms * per,
                                        Share(profile, profile.window_ms)));
  return out;
}

std::string FormatLargestOps(const OpProfile& profile, int n) {
  std::string out;
  for (size_t i = 0; i < profile.ops.size() && i < static_cast<size_t>(std::max(n, 0)); ++i) {
    absl::StrAppend(&out, i > 0 ? ", " : "", profile.ops[i].op,
                    absl::StrFormat(" %.1f%%", Share(profile, profile.ops[i].total_ms)));
  }
  return out;
}

}  // namespace lmf::kernels
