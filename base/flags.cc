// Reading a command line into Abseil flags, with the rules and errors of flags.h, and the --help text.
#include "base/flags.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/check.h"
#include "base/json.h"

namespace lmf {
namespace {

// "<program>[ <verb>]" of the last parse, for its errors.
std::string& LastProgram() {
  static auto* program = new std::string();
  return *program;
}

void PrintError(const std::string& program, absl::string_view message) {
  std::fprintf(stderr, "%s: %s\nTry '%s --help'.\n", program.c_str(), std::string(message).c_str(),
               program.c_str());
}

// The flags the last parse found: name -> the text given (the last one of a repeated flag).
std::map<std::string, std::string>& GivenTexts() {
  static auto* given = new std::map<std::string, std::string>();
  return *given;
}

std::string ProgramName(const char* argv0) {
  if (argv0 == nullptr) return "";
  const char* slash = std::strrchr(argv0, '/');
  return slash != nullptr ? slash + 1 : argv0;
}

bool IsHelpName(absl::string_view name) {
  return name == "help" || name == "helpfull" || name == "helpshort";
}

// "--name..." or "-name...", a letter or '_' after the dashes: an argument that is a flag. "-", "-3", "--"
// and "file" are not.
bool LooksLikeFlag(absl::string_view arg) {
  if (!absl::ConsumePrefix(&arg, "-")) return false;
  absl::ConsumePrefix(&arg, "-");
  return !arg.empty() && (std::isalpha(static_cast<unsigned char>(arg[0])) || arg[0] == '_');
}

// The name in a flag argument: "--name=value" -> "name".
absl::string_view FlagName(absl::string_view arg) {
  absl::ConsumePrefix(&arg, "-");
  absl::ConsumePrefix(&arg, "-");
  return arg.substr(0, arg.find('='));
}

// A flag of the binary's own sources (not one of Abseil's, as --flagfile), or nullptr.
const absl::CommandLineFlag* OwnFlag(absl::string_view name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr || flag->IsRetired() || absl::StrContains(flag->Filename(), "absl/")) return nullptr;
  return flag;
}

std::vector<std::string> OwnFlagNames() {
  std::vector<std::string> names;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (OwnFlag(name) != nullptr) names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string FlagList(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names.empty() ? "none" : absl::StrCat("--", absl::StrJoin(names, ", --"));
}

// What a number flag's text must be: plain decimal for integers, no surrounding spaces for any.
enum class Number { kNone, kSigned, kUnsigned, kFloat };
struct NumberType {
  Number number = Number::kNone;
  bool optional = false;  // std::optional<number>: an empty text is no value
};

template <typename... T>
bool IsAnyOf(const absl::CommandLineFlag& flag) {
  return (flag.IsOfType<T>() || ...);
}

// Whether `flag` holds one of T or std::optional of one.
template <typename... T>
NumberType NumberOf(const absl::CommandLineFlag& flag, Number number) {
  if (IsAnyOf<T...>(flag)) return {number, false};
  if (IsAnyOf<std::optional<T>...>(flag)) return {number, true};
  return {};
}

NumberType NumberTypeOf(const absl::CommandLineFlag& f) {
  using llong = long long;                                                              // NOLINT(runtime/int)
  using ullong = unsigned long long;                                                    // NOLINT(runtime/int)
  using ulong = unsigned long;                                                          // NOLINT(runtime/int)
  using ushort = unsigned short;                                                        // NOLINT(runtime/int)
  for (const NumberType type : {NumberOf<short, int, long, llong>(f, Number::kSigned),  // NOLINT(runtime/int)
                                NumberOf<ushort, unsigned, ulong, ullong>(f, Number::kUnsigned),
                                NumberOf<float, double>(f, Number::kFloat)}) {
    if (type.number != Number::kNone) return type;
  }
  return {};
}

const char* Noun(Number number) {
  switch (number) {
    case Number::kSigned:
      return "an integer";
    case Number::kUnsigned:
      return "a non-negative integer";
    case Number::kFloat:
      return "a number";
    case Number::kNone:
      break;
  }
  return "";
}

bool PlainNumberText(absl::string_view text, NumberType type) {
  if (type.number == Number::kNone || (type.optional && text.empty())) return true;
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front())) ||
      std::isspace(static_cast<unsigned char>(text.back()))) {
    return false;
  }
  if (type.number == Number::kFloat) return true;  // Abseil's parser says the rest
  if (type.number == Number::kSigned) absl::ConsumePrefix(&text, "-");
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// One flag as written: its name, and its text unless it was a bare switch.
struct Occurrence {
  std::string name;
  std::string text;
  bool bare = false;
};

std::string MissingValue(absl::string_view name, const char* next) {
  return absl::StrCat("--", name, " needs a value: --", name, "=VALUE",
                      next != nullptr ? absl::StrCat(" (", next, " after it is a flag)") : "");
}

bool Contains(const std::vector<std::string>& names, absl::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

const FlagsVerb* FindVerb(const FlagsOptions& options, absl::string_view name) {
  for (const FlagsVerb& verb : options.verbs) {
    if (verb.name == name) return &verb;
  }
  return nullptr;
}

std::string VerbNames(const FlagsOptions& options) {
  std::vector<std::string> names;
  for (const FlagsVerb& verb : options.verbs) names.push_back(verb.name);
  return absl::StrJoin(names, ", ");
}

// "unknown flag --x ..." naming what is taken; for a tool with verbs, a flag of another verb says whose.
std::string UnknownFlag(absl::string_view name, const FlagsOptions& options, const FlagsVerb* verb,
                        const std::string& program) {
  if (verb == nullptr) {
    absl::string_view positive = name;
    const absl::CommandLineFlag* negated = absl::ConsumePrefix(&positive, "no") ? OwnFlag(positive) : nullptr;
    const std::string hint = negated != nullptr && negated->IsOfType<bool>()
                                 ? absl::StrCat(" (for false: --", positive, "=false)")
                                 : "";
    return absl::StrCat("unknown flag --", name, hint, "; known: ", FlagList(OwnFlagNames()));
  }
  const std::string command = absl::StrCat("\"", program, " ", verb->name, "\"");
  for (const FlagsVerb& other : options.verbs) {
    if (Contains(other.flags, name)) {
      return absl::StrCat("--", name, " is a flag of \"", program, " ", other.name, "\", not of ", command,
                          "; the flags of ", command, ": ", FlagList(verb->flags));
    }
  }
  return absl::StrCat("unknown flag --", name, " for ", command, "; its flags: ", FlagList(verb->flags));
}

std::string GivenTwice(const absl::CommandLineFlag& flag, const Occurrence& first, const Occurrence& second) {
  const auto text = [](const Occurrence& o) { return o.bare ? std::string("true") : o.text; };
  return absl::StrCat("--", flag.Name(), " is given twice (", text(first), " and ", text(second),
                      "); give it once",
                      flag.IsOfType<std::vector<std::string>>() ? " (a list is comma-separated)" : "");
}

absl::Status CheckPositional(const std::vector<std::string>& given, const std::vector<std::string>& wanted) {
  if (given.size() < wanted.size()) {
    return absl::InvalidArgumentError(absl::StrCat("missing ", wanted[given.size()]));
  }
  if (given.size() == wanted.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      wanted.empty() ? absl::StrCat("unexpected argument \"", given[0], "\" (flags are --name=value)")
                     : absl::StrCat("unexpected argument \"", given[wanted.size()], "\" after ",
                                    absl::StrJoin(wanted, " ")));
}

const FlagCheck* CheckOf(const FlagsOptions& options, absl::string_view name) {
  for (const FlagCheck& check : options.checks) {
    if (check.flag == name) return &check;
  }
  return nullptr;
}

// Sets one flag from its occurrences: OutOfRange for a text its type refuses.
absl::Status SetFlag(absl::CommandLineFlag& flag, const std::vector<const Occurrence*>& given,
                     const FlagsOptions& options) {
  const std::string name(flag.Name());
  std::string text = given.back()->text, error;
  if (flag.IsOfType<RepeatedString>()) {
    RepeatedString repeated;
    for (const Occurrence* o : given) repeated.values.push_back(o->text);
    LMF_CHECK(flag.ParseFrom(AbslUnparseFlag(repeated), &error)) << name << ": " << error;
  } else if (flag.IsOfType<bool>()) {
    if (given[0]->bare) text = "true";
    if (text != "true" && text != "false") {
      return absl::OutOfRangeError(absl::StrCat("--", name, " is a switch: --", name, " or --", name,
                                                "=true|false, got \"", text, "\""));
    }
    LMF_CHECK(flag.ParseFrom(text, &error)) << name << ": " << error;
  } else {
    const NumberType type = NumberTypeOf(flag);
    if (!PlainNumberText(text, type) || !flag.ParseFrom(text, &error)) {
      const FlagCheck* check = CheckOf(options, name);
      const std::string expected = check != nullptr               ? check->expected
                                   : type.number != Number::kNone ? Noun(type.number)
                                                                  : "";
      return absl::OutOfRangeError(expected.empty()
                                       ? absl::StrCat("--", name, "=", text, ": ", error)
                                       : absl::StrCat("--", name, "=", text, ": expected ", expected));
    }
  }
  GivenTexts()[name] = text;
  return absl::OkStatus();
}

// The verb of a tool with verbs (argv[1]); `help` where it asks for the tool's help instead.
absl::StatusOr<const FlagsVerb*> ReadVerb(int argc, char** argv, const FlagsOptions& options, bool* help) {
  if (argc < 2) {
    return absl::InvalidArgumentError(absl::StrCat("missing verb: expected one of ", VerbNames(options)));
  }
  const absl::string_view arg = argv[1];
  if (arg == "help" || (LooksLikeFlag(arg) && IsHelpName(FlagName(arg)))) {
    *help = true;
    return nullptr;
  }
  const FlagsVerb* verb = FindVerb(options, arg);
  if (verb == nullptr) {
    return absl::InvalidArgumentError(
        LooksLikeFlag(arg)
            ? absl::StrCat("expected a verb (", VerbNames(options), ") before the flags, got ", arg)
            : absl::StrCat("unknown verb \"", arg, "\"; expected one of ", VerbNames(options)));
  }
  for (const std::string& flag : verb->flags) {
    LMF_CHECK(OwnFlag(flag) != nullptr)
        << "verb " << verb->name << " names --" << flag << ", which is no flag";
  }
  return verb;
}

// The arguments from argv[first]: flags (one that takes a value takes the next argument where it has no
// "=") into `occurrences`, the rest into line->positional; line->help where a flag asks for help.
absl::Status SplitArguments(int argc, char** argv, int first, std::vector<Occurrence>* occurrences,
                            CommandLine* line) {
  bool flags_ended = false;
  for (int i = first; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (flags_ended || !LooksLikeFlag(arg)) {
      if (!flags_ended && arg == "--") {
        flags_ended = true;
      } else {
        line->positional.emplace_back(arg);
      }
      continue;
    }
    const size_t eq = arg.find('=');
    Occurrence o{std::string(FlagName(arg)), "", eq == absl::string_view::npos};
    if (IsHelpName(o.name)) {
      line->help = true;
      continue;
    }
    if (!o.bare) o.text = std::string(arg.substr(eq + 1));
    const absl::CommandLineFlag* flag = OwnFlag(o.name);
    if (o.bare && flag != nullptr && !flag->IsOfType<bool>()) {
      const bool next_is_value =
          i + 1 < argc && !LooksLikeFlag(argv[i + 1]) && std::strcmp(argv[i + 1], "--") != 0;
      if (!next_is_value) {
        return absl::InvalidArgumentError(MissingValue(o.name, i + 1 < argc ? argv[i + 1] : nullptr));
      }
      o.text = argv[++i];
      o.bare = false;
    }
    occurrences->push_back(std::move(o));
  }
  return absl::OkStatus();
}

// The occurrences of each flag, in the order first given; each flag must be taken (by the verb, if any)
// and given once, but a RepeatedString.
using Grouped = std::vector<std::pair<std::string, std::vector<const Occurrence*>>>;
absl::StatusOr<Grouped> GroupByFlag(const std::vector<Occurrence>& occurrences, const FlagsOptions& options,
                                    const FlagsVerb* verb, const std::string& program) {
  Grouped grouped;
  for (const Occurrence& o : occurrences) {
    const absl::CommandLineFlag* flag = OwnFlag(o.name);
    if (flag == nullptr || (verb != nullptr && !Contains(verb->flags, o.name))) {
      return absl::InvalidArgumentError(UnknownFlag(o.name, options, verb, program));
    }
    auto seen =
        std::find_if(grouped.begin(), grouped.end(), [&](const auto& g) { return g.first == o.name; });
    if (seen == grouped.end()) {
      grouped.push_back({o.name, {&o}});
    } else if (flag->IsOfType<RepeatedString>()) {
      seen->second.push_back(&o);
    } else {
      return absl::InvalidArgumentError(GivenTwice(*flag, *seen->second[0], o));
    }
  }
  return grouped;
}

// TryParseFlags, also saying which verb was read (for the error's prefix).
absl::StatusOr<CommandLine> Parse(int argc, char** argv, const FlagsOptions& options,
                                  std::string* verb_name) {
  GivenTexts().clear();
  const std::string program = ProgramName(argc > 0 ? argv[0] : nullptr);
  LastProgram() = program;
  CommandLine line;
  const FlagsVerb* verb = nullptr;
  if (!options.verbs.empty()) {
    absl::StatusOr<const FlagsVerb*> read = ReadVerb(argc, argv, options, &line.help);
    if (!read.ok()) return read.status();
    if (line.help) return line;
    verb = *read;
    line.verb = *verb_name = verb->name;
    LastProgram() = absl::StrCat(program, " ", verb->name);
  }
  std::vector<Occurrence> occurrences;
  absl::Status split = SplitArguments(argc, argv, verb != nullptr ? 2 : 1, &occurrences, &line);
  if (!split.ok()) return split;
  if (line.help) return line;
  absl::StatusOr<Grouped> grouped = GroupByFlag(occurrences, options, verb, program);
  if (!grouped.ok()) return grouped.status();
  if (absl::Status s = CheckPositional(line.positional, options.positional); !s.ok()) return s;
  // The values, then the checks of the flags given.
  for (const auto& [name, given] : *grouped) {
    if (absl::Status s = SetFlag(*absl::FindCommandLineFlag(name), given, options); !s.ok()) return s;
  }
  for (const FlagCheck& check : options.checks) {
    LMF_CHECK(OwnFlag(check.flag) != nullptr) << "a check names --" << check.flag << ", which is no flag";
    const auto text = GivenTexts().find(check.flag);
    if (text != GivenTexts().end() && !check.ok()) {
      return absl::OutOfRangeError(
          absl::StrCat("--", check.flag, "=", text->second, ": expected ", check.expected));
    }
  }
  return line;
}

std::string FlagLine(const absl::CommandLineFlag& flag) {
  // Strings quoted (an empty one shows as ""); an empty list, or an unset optional, as (none).
  std::string default_value = flag.DefaultValue();
  if (flag.IsOfType<std::string>()) {
    default_value = absl::StrCat("\"", default_value, "\"");
  } else if (default_value.empty()) {
    default_value = "(none)";
  }
  return absl::StrCat("    --", flag.Name(), " (", flag.Help(), "); default: ", default_value, "\n");
}

// The help of a tool with verbs: the verbs, or one verb's flags.
std::string VerbsHelp(const std::string& program, const FlagsOptions& options, const FlagsVerb* verb) {
  if (verb != nullptr) {
    std::string text = absl::StrCat(program, " ", verb->name, ": ", verb->summary, "\n\n  Flags of ", program,
                                    " ", verb->name, ":\n");
    std::vector<std::string> names = verb->flags;
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) absl::StrAppend(&text, FlagLine(*OwnFlag(name)));
    return text;
  }
  std::string text = absl::StrCat(program, ": ", absl::ProgramUsageMessage(), "\n\n  Verbs:\n");
  size_t width = 0;
  for (const FlagsVerb& v : options.verbs) width = std::max(width, v.name.size());
  for (const FlagsVerb& v : options.verbs) {
    absl::StrAppend(&text, "    ", v.name, std::string(width - v.name.size() + 2, ' '), v.summary, "\n");
  }
  absl::StrAppend(&text, "\n  '", program, " VERB --help' lists the flags of VERB.\n");
  return text;
}

}  // namespace

bool AbslParseFlag(absl::string_view text, RepeatedString* out, std::string* error) {
  out->values.clear();
  if (text.empty()) return true;
  absl::StatusOr<JsonValue> json = ParseJson(std::string_view(text.data(), text.size()));
  if (json.ok() && json->kind == JsonValue::Kind::kArray) {
    for (const JsonValue& value : json->array) {
      if (value.kind != JsonValue::Kind::kString) break;
      out->values.push_back(value.text);
    }
    if (out->values.size() == json->array.size()) return true;
  }
  *error = "expected a JSON array of strings";
  return false;
}

std::string AbslUnparseFlag(const RepeatedString& value) {
  if (value.values.empty()) return "";
  std::vector<std::string> quoted;
  for (const std::string& s : value.values) quoted.push_back(JsonQuote(s));
  return absl::StrCat("[", absl::StrJoin(quoted, ","), "]");
}

void PrintUsageError(absl::string_view message) { PrintError(LastProgram(), message); }

bool FlagGiven(absl::string_view name) { return GivenTexts().count(std::string(name)) > 0; }

std::string FlagsHelp(const char* argv0, const FlagsOptions& options, absl::string_view verb) {
  const std::string program = ProgramName(argv0);
  if (!options.verbs.empty()) return VerbsHelp(program, options, FindVerb(options, verb));
  std::string text = absl::StrCat(program, ": ", absl::ProgramUsageMessage(), "\n");
  // file -> (flag name -> its line); Abseil's own flags (--flagfile, --fromenv, ...) are left out.
  std::map<std::string, std::map<std::string, std::string>> by_file;
  for (const std::string& name : OwnFlagNames()) {
    const absl::CommandLineFlag& flag = *OwnFlag(name);
    by_file[flag.Filename()][name] = FlagLine(flag);
  }
  for (const auto& [file, lines] : by_file) {
    absl::StrAppend(&text, "\n  Flags from ", file, ":\n");
    for (const auto& [name, line] : lines) absl::StrAppend(&text, line);
  }
  return text;
}

absl::StatusOr<CommandLine> TryParseFlags(int argc, char** argv, const FlagsOptions& options) {
  std::string verb;
  return Parse(argc, argv, options, &verb);
}

CommandLine ParseFlags(int argc, char** argv, const FlagsOptions& options) {
  std::string verb;
  absl::StatusOr<CommandLine> line = Parse(argc, argv, options, &verb);
  const char* argv0 = argc > 0 ? argv[0] : nullptr;
  if (line.ok() && line->help) {
    const std::string help = FlagsHelp(argv0, options, verb);
    std::fwrite(help.data(), 1, help.size(), stdout);
    std::fflush(stdout);
    std::exit(0);
  }
  if (!line.ok()) {
    PrintError(LastProgram(), line.status().message());
    const bool value = absl::IsOutOfRange(line.status()) && options.value_exit_code != 0;
    std::exit(value ? options.value_exit_code : options.usage_exit_code);
  }
  return *std::move(line);
}

}  // namespace lmf
