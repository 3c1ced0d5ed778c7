// ParseFlags, the one command-line parser: --help (stdout, exit 0, the flags with their defaults; a tool's
// verbs), values given with "=" or in the next argument (never a flag taken as a value), switches, repeated
// flags, the errors a user can make (unknown or misplaced flag, missing value, a flag given twice, a stray
// argument, a bad number) each naming the flag, checks after parsing, and the exit status of each kind.
#include "base/flags.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, widgets, 3, "how many widgets");
ABSL_FLAG(std::string, label, "plain", "what to call them");
ABSL_FLAG(std::vector<std::string>, tags, {}, "tags to add");
ABSL_FLAG(bool, verbose_widgets, false, "say more");
ABSL_FLAG(std::string, prompt, "", "the text to start from");
ABSL_FLAG(lmf::RepeatedString, set, {}, "overrides a field; repeatable");
ABSL_FLAG(bool, resume, false, "continue the run");
ABSL_FLAG(int64_t, seed, 0, "a non-negative integer");
ABSL_FLAG(uint64_t, count, 1, "how many");
ABSL_FLAG(double, temperature, 0.8, "0 is greedy");
ABSL_FLAG(std::optional<int64_t>, batch, std::nullopt, "sequences per batch (none: the run's)");

namespace lmf {
namespace {

std::string TestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp ? tmp : "/tmp";
}

// argv for `args` (argv[0] first); the strings live in `storage`.
std::vector<char*> Argv(std::vector<std::string>& storage) {
  std::vector<char*> argv;
  for (std::string& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  return argv;
}

absl::StatusOr<CommandLine> Parse(std::vector<std::string> flags, const FlagsOptions& options = {}) {
  flags.insert(flags.begin(), "widget_tool");
  std::vector<char*> argv = Argv(flags);
  return TryParseFlags(static_cast<int>(argv.size()) - 1, argv.data(), options);
}

std::string ErrorOf(std::vector<std::string> flags, const FlagsOptions& options = {}) {
  absl::StatusOr<CommandLine> line = Parse(std::move(flags), options);
  return line.ok() ? "(parsed)" : std::string(line.status().message());
}

// Runs ParseFlags on `args` in a child process with stdout sent to `out`; the child exits 0 after the help,
// or 3 if ParseFlags returned.
void ParseInChild(std::vector<std::string> args, const std::string& out, const FlagsOptions& options = {}) {
  std::vector<char*> argv = Argv(args);
  if (std::freopen(out.c_str(), "w", stdout) == nullptr) std::exit(4);
  ParseFlags(static_cast<int>(argv.size()) - 1, argv.data(), options);
  std::exit(3);
}

class FlagsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { absl::SetProgramUsageMessage("Counts widgets."); }
  absl::FlagSaver saver_;  // each test starts from the defaults
};

TEST_F(FlagsTest, HelpListsTheProgramsFlagsWithDefaults) {
  const std::string help = FlagsHelp("/some/where/widget_tool");
  EXPECT_EQ(help.rfind("widget_tool: Counts widgets.\n", 0), 0u) << help;
  EXPECT_NE(help.find("  Flags from base/flags_test.cc:\n"), std::string::npos) << help;
  EXPECT_NE(help.find("    --widgets (how many widgets); default: 3\n"), std::string::npos) << help;
  EXPECT_NE(help.find("    --label (what to call them); default: \"plain\"\n"), std::string::npos) << help;
  EXPECT_NE(help.find("    --tags (tags to add); default: (none)\n"), std::string::npos) << help;
  EXPECT_NE(help.find("    --set (overrides a field; repeatable); default: (none)\n"), std::string::npos)
      << help;
  EXPECT_NE(help.find("    --batch (sequences per batch (none: the run's)); default: (none)\n"),
            std::string::npos)
      << help;
  // Sorted by name, and none of Abseil's own flags.
  EXPECT_LT(help.find("--label"), help.find("--widgets")) << help;
  EXPECT_EQ(help.find("--flagfile"), std::string::npos) << help;
}

TEST_F(FlagsTest, HelpPrintsOnStdoutAndExitsZero) {
  for (const char* help_flag : {"--help", "-help", "--helpfull", "--helpshort"}) {
    const std::string out = TestDir() + "/help.txt";
    std::remove(out.c_str());
    EXPECT_EXIT(ParseInChild({"widget_tool", "--widgets=5", help_flag, "more"}, out),
                ::testing::ExitedWithCode(0), "")
        << help_flag;
    EXPECT_EQ(ReadFile(out).value_or(""), FlagsHelp("widget_tool")) << help_flag;
  }
}

TEST_F(FlagsTest, HelpAfterDoubleDashIsPositional) {
  FlagsOptions options;
  options.positional = {"ARG"};
  const std::string out = TestDir() + "/positional.txt";
  EXPECT_EXIT(ParseInChild({"widget_tool", "--", "--help"}, out, options), ::testing::ExitedWithCode(3), "");
  EXPECT_EQ(ReadFile(out).value_or(""), "");
  absl::StatusOr<CommandLine> line = Parse({"--", "--help"}, options);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(line->positional, std::vector<std::string>{"--help"});
}

// "--label --help" and "--prompt --help": a flag that takes a value is followed by a flag, so the command is
// a missing value (the user may have meant the text "--help"), not a request for help: a usage error
// (exit 1 here) naming the flag, and no help printed.
TEST_F(FlagsTest, HelpAfterAFlagThatNeedsAValueIsAMissingValue) {
  for (const char* flag : {"--label", "-widgets", "--prompt"}) {
    const std::string out = TestDir() + "/value.txt";
    std::remove(out.c_str());
    EXPECT_EXIT(ParseInChild({"widget_tool", flag, "-help", "file.txt"}, out), ::testing::ExitedWithCode(1),
                "needs a value")
        << flag;
    EXPECT_EQ(ReadFile(out).value_or(""), "") << flag;
  }
  EXPECT_EQ(ErrorOf({"--prompt", "--help"}),
            "--prompt needs a value: --prompt=VALUE (--help after it is a flag)");
}

TEST_F(FlagsTest, HelpAfterABooleanFlagOrAnEqualsValueIsHelp) {
  for (const char* flag : {"--verbose_widgets", "--label=x", "--nonexistent_flag", "--widgets=many"}) {
    const std::string out = TestDir() + "/after.txt";
    std::remove(out.c_str());
    EXPECT_EXIT(ParseInChild({"widget_tool", flag, "--help"}, out), ::testing::ExitedWithCode(0), "") << flag;
    EXPECT_EQ(ReadFile(out).value_or(""), FlagsHelp("widget_tool")) << flag;
  }
}

// --help beside a full command prints the help and runs nothing (ParseFlags exits); TryParseFlags says so
// without checking the rest.
TEST_F(FlagsTest, HelpBesideAFullCommand) {
  const std::string out = TestDir() + "/beside.txt";
  EXPECT_EXIT(ParseInChild({"widget_tool", "--prompt=Once upon", "--set=a=1", "--help"}, out),
              ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(ReadFile(out).value_or(""), FlagsHelp("widget_tool"));
  absl::StatusOr<CommandLine> line = Parse({"--prompt=Once upon", "--help", "--widgets=x"});
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(line->help);
}

TEST_F(FlagsTest, ValuesWithEqualsOrInTheNextArgument) {
  FlagsOptions options;
  options.positional = {"FILE"};
  absl::StatusOr<CommandLine> line =
      Parse({"--widgets=7", "--label", "shiny", "file.txt", "--seed", "-3"}, options);
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(line->positional, std::vector<std::string>{"file.txt"});
  EXPECT_EQ(absl::GetFlag(FLAGS_widgets), 7);
  EXPECT_EQ(absl::GetFlag(FLAGS_label), "shiny");
  EXPECT_EQ(absl::GetFlag(FLAGS_seed), -3);  // "-3" is a value, not a flag
  EXPECT_TRUE(FlagGiven(FLAGS_label));
  EXPECT_FALSE(FlagGiven(FLAGS_prompt));
}

TEST_F(FlagsTest, ValuesRepeatsAndSwitches) {
  absl::StatusOr<CommandLine> line =
      Parse({"--prompt=Once upon", "--set=a.b=1", "--set", "c=x,y", "--set=", "--resume", "--tags=p,q"});
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_prompt), "Once upon");
  // Every --set in order, whole: commas are no separators, an empty one is a value.
  EXPECT_EQ(absl::GetFlag(FLAGS_set).values, (std::vector<std::string>{"a.b=1", "c=x,y", ""}));
  EXPECT_TRUE(absl::GetFlag(FLAGS_resume));
  EXPECT_EQ(absl::GetFlag(FLAGS_tags), (std::vector<std::string>{"p", "q"}));
  ASSERT_TRUE(Parse({"--prompt="}).ok());  // an empty value is a value
  EXPECT_EQ(absl::GetFlag(FLAGS_prompt), "");
  EXPECT_TRUE(FlagGiven(FLAGS_prompt));
  ASSERT_TRUE(Parse({"--resume=false"}).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_resume));
}

TEST_F(FlagsTest, RepeatedStringTextRoundTrips) {
  const RepeatedString value{{"a=1", "b=x,y", "quote \" and \\", "", "caf\xc3\xa9"}};
  RepeatedString back;
  std::string error;
  ASSERT_TRUE(AbslParseFlag(AbslUnparseFlag(value), &back, &error)) << error;
  EXPECT_EQ(back.values, value.values);
  EXPECT_EQ(AbslUnparseFlag(RepeatedString{}), "");
  EXPECT_FALSE(AbslParseFlag("a=1", &back, &error));
  EXPECT_EQ(error, "expected a JSON array of strings");
  EXPECT_FALSE(AbslParseFlag("[1]", &back, &error));
}

// A bare `--prompt` used to be the prompt "true" (and eval's bare --tokens the file ./true).
TEST_F(FlagsTest, AFlagThatTakesAValueNeedsOne) {
  EXPECT_EQ(ErrorOf({"--prompt"}), "--prompt needs a value: --prompt=VALUE");
  EXPECT_EQ(ErrorOf({"--prompt", "--resume"}),
            "--prompt needs a value: --prompt=VALUE (--resume after it is a flag)");
  EXPECT_EQ(ErrorOf({"--prompt", "--"}), "--prompt needs a value: --prompt=VALUE (-- after it is a flag)");
  EXPECT_TRUE(Parse({"--resume"}).ok());  // a switch
  // The value in the next argument, as other CLIs take it: read as meant.
  ASSERT_TRUE(Parse({"--set", "run.seed=3"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_set).values, std::vector<std::string>{"run.seed=3"});
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, Parse({"--prompt"}).status().code());
}

TEST_F(FlagsTest, UnknownFlagsAndPositionalArgumentsAreRefused) {
  EXPECT_EQ(
      ErrorOf({"--promt=x"}),
      "unknown flag --promt; known: --batch, --count, --label, --prompt, --resume, --seed, --set, --tags, "
      "--temperature, --verbose_widgets, --widgets");
  EXPECT_EQ(ErrorOf({"--noresume"}).rfind("unknown flag --noresume (for false: --resume=false); known: ", 0),
            0u);
  EXPECT_EQ(ErrorOf({"--flagfile=x"}).rfind("unknown flag --flagfile; ", 0), 0u);  // Abseil's own: not taken
  EXPECT_EQ(ErrorOf({"story.txt"}), "unexpected argument \"story.txt\" (flags are --name=value)");
  EXPECT_EQ(ErrorOf({"--", "story.txt"}), "unexpected argument \"story.txt\" (flags are --name=value)");
  EXPECT_EQ(ErrorOf({"--resume", "yes"}), "unexpected argument \"yes\" (flags are --name=value)");
  FlagsOptions options;
  options.positional = {"IN", "OUT"};
  EXPECT_EQ(ErrorOf({"a"}, options), "missing OUT");
  EXPECT_EQ(ErrorOf({"a", "b", "c"}, options), "unexpected argument \"c\" after IN OUT");
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, Parse({"story.txt"}).status().code());
}

TEST_F(FlagsTest, AFlagGivenTwiceIsRefused) {
  EXPECT_EQ(ErrorOf({"--label=a", "--label", "b"}), "--label is given twice (a and b); give it once");
  EXPECT_EQ(ErrorOf({"--tags=a", "--tags=b"}),
            "--tags is given twice (a and b); give it once (a list is comma-separated)");
  EXPECT_EQ(ErrorOf({"--resume", "--resume=false"}),
            "--resume is given twice (true and false); give it once");
  EXPECT_TRUE(Parse({"--set=a=1", "--set=a=2"}).ok());  // a RepeatedString repeats
}

TEST_F(FlagsTest, SwitchesAreTrueOrFalse) {
  for (const char* value : {"maybe", "1", "yes", "True", ""}) {
    absl::StatusOr<CommandLine> line = Parse({absl::StrCat("--resume=", value)});
    EXPECT_EQ(line.status().message(),
              absl::StrCat("--resume is a switch: --resume or --resume=true|false, got \"", value, "\""));
    EXPECT_EQ(line.status().code(), absl::StatusCode::kOutOfRange);
  }
}

TEST_F(FlagsTest, NumbersArePlainAndOfTheirType) {
  for (const char* text : {" 2", "2 ", "+2", "0x10", "2.5", "", "two", "99999999999"}) {
    EXPECT_EQ(ErrorOf({absl::StrCat("--widgets=", text)}),
              absl::StrCat("--widgets=", text, ": expected an integer"));
  }
  EXPECT_EQ(ErrorOf({"--count=-1"}), "--count=-1: expected a non-negative integer");
  EXPECT_EQ(ErrorOf({"--temperature=warm"}), "--temperature=warm: expected a number");
  EXPECT_EQ(ErrorOf({"--temperature= 1"}), "--temperature= 1: expected a number");
  EXPECT_EQ(Parse({"--widgets=two"}).status().code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(Parse({"--widgets=-12", "--temperature=1e-3", "--count=18446744073709551615"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_widgets), -12);
  EXPECT_EQ(absl::GetFlag(FLAGS_temperature), 1e-3);
  EXPECT_EQ(absl::GetFlag(FLAGS_count), 18446744073709551615u);
}

TEST_F(FlagsTest, ChecksRunOnTheFlagsGiven) {
  FlagsOptions options;
  options.checks = {AtLeast(FLAGS_seed, 0), InRange(FLAGS_widgets, 5, 10), Finite(FLAGS_temperature),
                    AtMost(FLAGS_count, 256, "one batch"), AtLeast(FLAGS_batch, 1)};
  EXPECT_TRUE(Parse({}, options).ok());  // --widgets' default (3) is not checked: only what is given
  EXPECT_EQ(absl::GetFlag(FLAGS_batch), std::nullopt);
  EXPECT_EQ(ErrorOf({"--seed=-5"}, options), "--seed=-5: expected at least 0");
  EXPECT_EQ(ErrorOf({"--widgets=11"}, options), "--widgets=11: expected an integer from 5 to 10");
  // A text that does not parse says what the check expects.
  EXPECT_EQ(ErrorOf({"--widgets=99999999999"}, options),
            "--widgets=99999999999: expected an integer from 5 to 10");
  EXPECT_EQ(ErrorOf({"--widgets= 6"}, options), "--widgets= 6: expected an integer from 5 to 10");
  EXPECT_EQ(ErrorOf({"--temperature=nan"}, options), "--temperature=nan: expected a finite number");
  EXPECT_EQ(ErrorOf({"--temperature=-inf"}, options), "--temperature=-inf: expected a finite number");
  EXPECT_EQ(ErrorOf({"--count=257"}, options), "--count=257: expected at most 256 (one batch)");
  EXPECT_EQ(ErrorOf({"--batch=0"}, options), "--batch=0: expected at least 1");
  EXPECT_EQ(ErrorOf({"--batch="}, options), "--batch=: expected at least 1");  // given, with no value
  EXPECT_EQ(Parse({"--seed=-5"}, options).status().code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(Parse({"--batch=4", "--seed=0", "--widgets=10", "--count=256"}, options).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_batch), std::optional<int64_t>(4));
}

// ParseFlags' errors: "<program>: <message>" and a pointer to --help on stderr; the usage exit status for a
// command line that cannot be read, the value exit status for a value.
TEST_F(FlagsTest, ErrorsExitWithTheBinarysStatus) {
  FlagsOptions options;
  options.usage_exit_code = 2;
  options.value_exit_code = 5;
  options.checks = {AtLeast(FLAGS_seed, 0)};
  const std::string out = TestDir() + "/errors.txt";
  EXPECT_EXIT(ParseInChild({"/bin/widget_tool", "--sett=x"}, out, options), ::testing::ExitedWithCode(2),
              "^widget_tool: unknown flag --sett; known: .*\nTry 'widget_tool --help'.\n$");
  EXPECT_EXIT(ParseInChild({"widget_tool", "--prompt"}, out, options), ::testing::ExitedWithCode(2),
              "^widget_tool: --prompt needs a value: --prompt=VALUE\n");
  EXPECT_EXIT(ParseInChild({"widget_tool", "--seed=-5"}, out, options), ::testing::ExitedWithCode(5),
              "^widget_tool: --seed=-5: expected at least 0\n");
  EXPECT_EXIT(ParseInChild({"widget_tool", "--seed=x"}, out, options), ::testing::ExitedWithCode(5),
              "^widget_tool: --seed=x: expected at least 0\n");
  options.value_exit_code = 0;  // the usage status for both
  EXPECT_EXIT(ParseInChild({"widget_tool", "--seed=-5"}, out, options), ::testing::ExitedWithCode(2), "");
  EXPECT_EQ(ReadFile(out).value_or("x"), "");
}

// A usage error found by the binary after parsing reads as ParseFlags' own.
TEST_F(FlagsTest, PrintUsageErrorNamesTheProgramAndVerb) {
  ASSERT_TRUE(Parse({}).ok());
  ::testing::internal::CaptureStderr();
  PrintUsageError("--config=FILE is required");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "widget_tool: --config=FILE is required\nTry 'widget_tool --help'.\n");
}

FlagsOptions Verbs() {
  FlagsOptions options;
  options.verbs = {{"count", "Counts the widgets.", {"widgets", "verbose_widgets", "set"}},
                   {"name", "Names the widgets.", {"label", "tags"}}};
  return options;
}

TEST_F(FlagsTest, AVerbTakesItsOwnFlags) {
  absl::StatusOr<CommandLine> line = Parse({"count", "--widgets=4", "--set=a", "--set=b"}, Verbs());
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(line->verb, "count");
  EXPECT_EQ(absl::GetFlag(FLAGS_widgets), 4);
  EXPECT_EQ(absl::GetFlag(FLAGS_set).values, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ErrorOf({"name", "--widgets=4"}, Verbs()),
            "--widgets is a flag of \"widget_tool count\", not of \"widget_tool name\"; the flags of "
            "\"widget_tool name\": --label, --tags");
  EXPECT_EQ(ErrorOf({"count", "--bogus=1"}, Verbs()),
            "unknown flag --bogus for \"widget_tool count\"; its flags: --set, --verbose_widgets, --widgets");
  EXPECT_EQ(
      ErrorOf({"count", "--prompt=x"}, Verbs()),  // a flag of the binary that no verb takes
      "unknown flag --prompt for \"widget_tool count\"; its flags: --set, --verbose_widgets, --widgets");
  EXPECT_EQ(ErrorOf({"count", "extra"}, Verbs()), "unexpected argument \"extra\" (flags are --name=value)");
  EXPECT_EQ(ErrorOf({"frobnicate"}, Verbs()), "unknown verb \"frobnicate\"; expected one of count, name");
  EXPECT_EQ(ErrorOf({}, Verbs()), "missing verb: expected one of count, name");
  EXPECT_EQ(ErrorOf({"--widgets=3", "count"}, Verbs()),
            "expected a verb (count, name) before the flags, got --widgets=3");
  EXPECT_EQ(Parse({"frobnicate"}, Verbs()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(FlagsTest, AToolWithVerbsListsThemAndEachVerbsFlags) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--help"}, {"help"}, {"-helpfull"}}) {
    absl::StatusOr<CommandLine> line = Parse(args, Verbs());
    ASSERT_TRUE(line.ok()) << line.status();
    EXPECT_TRUE(line->help);
    EXPECT_EQ(line->verb, "");
  }
  EXPECT_EQ(FlagsHelp("/bin/widget_tool", Verbs()),
            "widget_tool: Counts widgets.\n\n  Verbs:\n    count  Counts the widgets.\n    name   Names the "
            "widgets.\n"
            "\n  'widget_tool VERB --help' lists the flags of VERB.\n");
  absl::StatusOr<CommandLine> line = Parse({"name", "--label=x", "--help"}, Verbs());
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(line->help);
  EXPECT_EQ(line->verb, "name");
  EXPECT_EQ(
      FlagsHelp("widget_tool", Verbs(), "name"),
      "widget_tool name: Names the widgets.\n\n  Flags of widget_tool name:\n"
      "    --label (what to call them); default: \"plain\"\n    --tags (tags to add); default: (none)\n");
  ::testing::internal::CaptureStderr();
  PrintUsageError("give --label");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "widget_tool name: give --label\nTry 'widget_tool name --help'.\n");
  const std::string out = TestDir() + "/verb_help.txt";
  EXPECT_EXIT(ParseInChild({"widget_tool", "name", "--help"}, out, Verbs()), ::testing::ExitedWithCode(0),
              "");
  EXPECT_EQ(ReadFile(out).value_or(""), FlagsHelp("widget_tool", Verbs(), "name"));
  // An error after the verb names the verb.
  EXPECT_EXIT(ParseInChild({"widget_tool", "name", "--widgets=4"}, out, Verbs()),
              ::testing::ExitedWithCode(1),
              "^widget_tool name: --widgets is a flag of .*\nTry 'widget_tool name --help'.\n$");
}

}  // namespace
}  // namespace lmf
