// Command-line flags, read one way in every binary: flags are Abseil's (ABSL_FLAG, absl::GetFlag), the
// command line is read by lmf::ParseFlags with these rules (absl::ParseCommandLine is not used: the
// system's Abseil, 20220623, exits 1 after its --help, and it lacks the rest):
//   --name=value, or --name value where the value does not look like a flag: a flag that takes a value
//     given none (a bare `--prompt`, or `--prompt --seed=1`) is an error, never "true" or "--seed=1";
//   a bool flag is a switch: --name, --name=true or --name=false, nothing else (not 1, yes or --noname);
//   a flag is given once (twice is an error: which one was meant?), except a RepeatedString flag, which
//     keeps every occurrence in order, never split on commas: --set=a.b=1 --set=c=x,y;
//   an unknown flag, or one the verb does not take, is an error naming it (and the verb);
//   positional arguments only where the binary declares them; "--" ends the flags;
//   integers are plain decimal ("-3", not " 3", "+3" or "0x3"); the binary's FlagChecks (AtLeast, InRange,
//     Finite, ...) run right after parsing, on the flags given.
// `--help` (or -help, --helpfull, --helpshort) anywhere prints on stdout the usage message and the binary's
// own flags with their help and defaults, and exits 0 without checking the rest (it is no help as the
// value of a flag: `--label --help` is a missing value). A tool with verbs (`bpe train --input=...`):
// `bpe --help` (or `bpe help`) lists the verbs, `bpe train --help` the flags of train.
// An error prints "<program>[ <verb>]: <what is wrong, naming the flag>" and "Try '<program> --help'." on
// stderr and exits with the binary's exit code for it (FlagsOptions).
//
//   ABSL_FLAG(int64_t, max_tokens, 256, "new tokens per prompt");
//   absl::SetProgramUsageMessage("Samples text from a trained model.");
//   lmf::FlagsOptions options;
//   options.checks = {lmf::AtLeast(FLAGS_max_tokens, 1)};
//   lmf::ParseFlags(argc, argv, options);
#ifndef LMFORGE_BASE_FLAGS_H_
#define LMFORGE_BASE_FLAGS_H_

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace lmf {

// The value of a flag that may repeat: every occurrence, in order, each kept whole (commas included).
//   ABSL_FLAG(lmf::RepeatedString, set, {}, "overrides a field; repeatable");
//   for (const std::string& s : absl::GetFlag(FLAGS_set).values) ...
struct RepeatedString {
  std::vector<std::string> values;
};
// Its text for Abseil (what ParseFlags hands over, and the help's default): "" for none, else a JSON array
// of strings.
bool AbslParseFlag(absl::string_view text, RepeatedString* out, std::string* error);
std::string AbslUnparseFlag(const RepeatedString& value);

// A condition on a flag's value, checked right after parsing where the flag was given. A failure is the
// error "--<flag>=<text as given>: expected <expected>", also used when the text does not parse.
struct FlagCheck {
  std::string flag;      // its name
  std::string expected;  // e.g. "at least 1", "an integer from 0 to 1024", "a number in (0, 1]"
  std::function<bool()> ok;
};

namespace flags_internal {
template <typename T>
struct Number {
  using type = T;
};
template <typename T>
struct Number<std::optional<T>> {
  using type = T;
};
template <typename T>
std::optional<T> Read(const absl::Flag<T>& flag) {
  return absl::GetFlag(flag);
}
template <typename T>
std::optional<T> Read(const absl::Flag<std::optional<T>>& flag) {
  return absl::GetFlag(flag);
}
template <typename F>
std::string Name(const absl::Flag<F>& flag) {
  return std::string(absl::GetFlagReflectionHandle(flag).Name());
}
}  // namespace flags_internal

// The checks (F is a number type, or std::optional of one, where the empty value `--flag=` fails them).
template <typename F>
FlagCheck AtLeast(const absl::Flag<F>& flag, typename flags_internal::Number<F>::type min) {
  return {flags_internal::Name(flag), absl::StrCat("at least ", min), [&flag, min] {
            const auto v = flags_internal::Read(flag);
            return v.has_value() && *v >= min;
          }};
}
// `why`, if any, follows in parentheses: "at most 256 (the samples are one batch)".
template <typename F>
FlagCheck AtMost(const absl::Flag<F>& flag, typename flags_internal::Number<F>::type max,
                 absl::string_view why = "") {
  const std::string note = why.empty() ? "" : absl::StrCat(" (", why, ")");
  return {flags_internal::Name(flag), absl::StrCat("at most ", max, note), [&flag, max] {
            const auto v = flags_internal::Read(flag);
            return v.has_value() && *v <= max;
          }};
}
// "an integer from lo to hi" (integers), "a number from lo to hi" (floating point).
template <typename F>
FlagCheck InRange(const absl::Flag<F>& flag, typename flags_internal::Number<F>::type lo,
                  typename flags_internal::Number<F>::type hi) {
  const bool integral = std::is_integral<typename flags_internal::Number<F>::type>::value;
  return {flags_internal::Name(flag),
          absl::StrCat(integral ? "an integer" : "a number", " from ", lo, " to ", hi), [&flag, lo, hi] {
            const auto v = flags_internal::Read(flag);
            return v.has_value() && *v >= lo && *v <= hi;
          }};
}
// Not NaN or infinite.
template <typename F>
FlagCheck Finite(const absl::Flag<F>& flag) {
  return {flags_internal::Name(flag), "a finite number", [&flag] {
            const auto v = flags_internal::Read(flag);
            return v.has_value() && std::isfinite(*v);
          }};
}

// One verb of a tool with verbs: its name, a line for `tool --help`, and the flags it takes, by name.
struct FlagsVerb {
  std::string name;
  std::string summary;
  std::vector<std::string> flags;
};

// How a binary's command line is read.
struct FlagsOptions {
  // A tool with verbs: argv[1] names one of these; each takes only its own flags. Empty: every flag the
  // binary defines (not Abseil's own) is taken.
  std::vector<FlagsVerb> verbs;
  // The positional arguments the binary requires, by name (e.g. {"OUT_DIR"}); none by default, where a
  // positional argument is an error naming it.
  std::vector<std::string> positional;
  std::vector<FlagCheck> checks;
  // Exit status of a command line that cannot be read: an unknown or misplaced flag, a missing value, a
  // flag given twice, a stray or missing argument, an unknown verb.
  int usage_exit_code = 1;
  // Exit status of a value that does not parse or fails a check; 0: usage_exit_code.
  int value_exit_code = 0;
};

// What the command line held besides its flags (which are set).
struct CommandLine {
  std::string verb;                     // a tool with verbs: the verb; else ""
  std::vector<std::string> positional;  // as FlagsOptions::positional names them
  bool help = false;                    // --help was asked for (only TryParseFlags returns it)
};

// Parses argv[1..] as above. Prints the help and exits 0 where it is asked for; prints the error and
// exits with FlagsOptions' exit status where the command line cannot be used. Call
// absl::SetProgramUsageMessage first.
CommandLine ParseFlags(int argc, char** argv, const FlagsOptions& options = {});

// The same, printing nothing and never exiting (for tests): InvalidArgument for a command line that cannot
// be read, OutOfRange for a value that does not parse or fails a check, each message naming the flag
// (without the program's name); `help` set (and the flags not checked) where --help was asked for.
absl::StatusOr<CommandLine> TryParseFlags(int argc, char** argv, const FlagsOptions& options = {});

// A usage error the binary finds after parsing (a required flag missing, two flags that exclude each
// other): prints "<program>[ <verb>]: <message>" and "Try '<program> --help'." on stderr, as ParseFlags
// prints its own.
void PrintUsageError(absl::string_view message);

// Whether the last parse found `flag` on the command line (`--tokenizer=` is given, and empty).
bool FlagGiven(absl::string_view name);
template <typename F>
bool FlagGiven(const absl::Flag<F>& flag) {
  return FlagGiven(absl::GetFlagReflectionHandle(flag).Name());
}

// What --help prints for the program `argv0`: "<name>: <usage message>", then the flags of the binary's own
// sources (not Abseil's), grouped by the file that defines them, sorted by name, each with its help and
// default. With verbs: the verbs and their summaries; for `verb`, "<name> <verb>: <summary>" and its flags.
std::string FlagsHelp(const char* argv0, const FlagsOptions& options = {}, absl::string_view verb = "");

}  // namespace lmf

#endif  // LMFORGE_BASE_FLAGS_H_
