// Command-line parsing for the experiment binaries (see cli_args.h).
#include "experiments/cli_args.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/loader.h"

namespace lmf::experiments {

absl::StatusOr<CliArgs> CliArgs::Parse(int argc, char** argv, const std::set<std::string>& allowed,
                                       const std::set<std::string>& switches) {
  CliArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg, "\" (flags are --name=value)"));
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (allowed.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, "; known: --", absl::StrJoin(allowed, ", --")));
    }
    if (eq == std::string::npos && switches.count(name) == 0) {
      // "--set run.seed=3": the value went into the next argument.
      const bool next_is_value = i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0;
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " needs a value: --", name, "=VALUE",
          next_is_value ? absl::StrCat(" in one argument (--", name, "=", argv[i + 1], "), not --", name, " ",
                                       argv[i + 1])
                        : ""));
    }
    args.values_[name].push_back(eq == std::string::npos ? "true" : arg.substr(eq + 1));
  }
  return args;
}

std::string CliArgs::Get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.back();
}

absl::StatusOr<int64_t> CliArgs::GetInt(const std::string& name, int64_t fallback, int64_t min) const {
  absl::StatusOr<int64_t> value = GetInt(name, fallback);
  if (value.ok() && *value < min) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "=", *value, ": expected at least ", min));
  }
  return value;
}

std::vector<std::string> CliArgs::GetAll(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>() : it->second;
}

absl::StatusOr<int64_t> CliArgs::GetInt(const std::string& name, int64_t fallback) const {
  if (!Has(name)) return fallback;
  int64_t value;
  if (!absl::SimpleAtoi(Get(name), &value)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " expects an integer, got \"", Get(name), "\""));
  }
  return value;
}

absl::StatusOr<double> CliArgs::GetDouble(const std::string& name, double fallback) const {
  if (!Has(name)) return fallback;
  double value;
  if (!absl::SimpleAtod(Get(name), &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " expects a finite number, got \"", Get(name), "\""));
  }
  return value;
}

absl::StatusOr<bool> CliArgs::GetBool(const std::string& name, bool fallback) const {
  if (!Has(name)) return fallback;
  const std::string v = Get(name);
  if (v == "true") return true;
  if (v == "false") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, " is a switch: --", name, " or --", name, "=true|false, got \"", v, "\""));
}

bool PrintHelpIfAsked(const absl::StatusOr<CliArgs>& args, const char* usage) {
  if (!args.ok() || !args->Has("help")) return false;
  std::fputs(usage, stdout);
  return true;
}

}  // namespace lmf::experiments
