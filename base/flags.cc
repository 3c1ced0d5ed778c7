// Abseil flags with a help that exits 0 (see flags.h).
#include "base/flags.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace lmf {
namespace {

// The flag name of `arg` ("--name..." or "-name..."), or "" for an argument that is not a flag.
absl::string_view FlagPart(absl::string_view arg) {
  if (absl::ConsumePrefix(&arg, "--") || absl::ConsumePrefix(&arg, "-")) return arg;
  return "";
}

bool IsHelpArgument(absl::string_view arg) {
  const absl::string_view name = FlagPart(arg);
  return name == "help" || name == "helpfull" || name == "helpshort";
}

// True where `arg` is a known non-boolean flag written without "=" ("--label" or "-label"): Abseil then
// reads the next argument as its value, so "--label --help" labels with "--help" and asks for no help.
bool TakesNextArgument(absl::string_view arg) {
  const absl::string_view name = FlagPart(arg);
  if (name.empty() || absl::StrContains(name, '=')) return false;
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && !flag->IsOfType<bool>();
}

}  // namespace

std::string FlagsHelp(const char* argv0) {
  const char* slash = argv0 == nullptr ? nullptr : std::strrchr(argv0, '/');
  const std::string name = argv0 == nullptr ? "" : (slash != nullptr ? slash + 1 : argv0);
  std::string text = absl::StrCat(name, ": ", absl::ProgramUsageMessage(), "\n");
  // file -> (flag name -> its line); Abseil's own flags (--flagfile, --fromenv, ...) are left out.
  std::map<std::string, std::map<std::string, std::string>> by_file;
  for (const auto& [flag_name, flag] : absl::GetAllFlags()) {
    const std::string file = flag->Filename();
    if (absl::StrContains(file, "absl/")) continue;
    // Strings quoted (an empty one shows as ""); an empty list as (none).
    std::string default_value = flag->DefaultValue();
    if (flag->IsOfType<std::string>()) {
      default_value = absl::StrCat("\"", default_value, "\"");
    } else if (default_value.empty()) {
      default_value = "(none)";
    }
    by_file[file][std::string(flag_name)] =
        absl::StrCat("    --", flag_name, " (", flag->Help(), "); default: ", default_value, "\n");
  }
  for (const auto& [file, lines] : by_file) {
    absl::StrAppend(&text, "\n  Flags from ", file, ":\n");
    for (const auto& [flag_name, line] : lines) absl::StrAppend(&text, line);
  }
  return text;
}

std::vector<char*> ParseFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;  // what follows is positional
    if (TakesNextArgument(argv[i])) {
      ++i;  // its value, whatever it reads
      continue;
    }
    if (IsHelpArgument(argv[i])) {
      const std::string help = FlagsHelp(argv[0]);
      std::fwrite(help.data(), 1, help.size(), stdout);
      std::fflush(stdout);
      std::exit(0);
    }
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace lmf
