// Command-line arguments of the experiment binaries (train, eval, generate): `--name=value` and bare
// `--name` switches (only the flags named as switches may be bare), where a flag may repeat (every --set=...
// is kept, in order, which absl's vector flags cannot do: they split on commas and keep only the last
// occurrence).
#ifndef LMFORGE_EXPERIMENTS_CLI_ARGS_H_
#define LMFORGE_EXPERIMENTS_CLI_ARGS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lmf::experiments {

class CliArgs {
 public:
  // Parses argv[1..]. `allowed` names every flag; anything else (or a positional argument) is an error
  // naming it. Only the `switches` among them may be given bare (`--resume`, read with GetBool); any other
  // flag needs a value (`--prompt` alone is an error, not the prompt "true").
  static absl::StatusOr<CliArgs> Parse(int argc, char** argv, const std::set<std::string>& allowed,
                                       const std::set<std::string>& switches = {"help"});

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  // The last value of a flag, or `fallback`.
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  // Every value of a repeated flag, in order.
  std::vector<std::string> GetAll(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  // An integer of at least `min`.
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback, int64_t min) const;
  // A finite number (nan and inf are refused).
  absl::StatusOr<double> GetDouble(const std::string& name, double fallback) const;
  // A switch: bare `--name` or `--name=true` is true, `--name=false` false; any other value is an error.
  absl::StatusOr<bool> GetBool(const std::string& name, bool fallback) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

// --help given (and the rest parsed): prints `usage` on stdout and returns true; the binary then exits 0
// having run nothing else, whatever other flags came with it.
bool PrintHelpIfAsked(const absl::StatusOr<CliArgs>& args, const char* usage);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_CLI_ARGS_H_
