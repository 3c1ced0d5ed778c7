// ParseFlags: --help prints the usage and the program's flags with their defaults on stdout and exits 0;
// anything after "--" is positional; other flags are parsed as Abseil parses them.
#include "base/flags.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "base/file.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, widgets, 3, "how many widgets");
ABSL_FLAG(std::string, label, "plain", "what to call them");
ABSL_FLAG(std::vector<std::string>, tags, {}, "tags to add");
ABSL_FLAG(bool, verbose_widgets, false, "say more");

namespace lmf {
namespace {

std::string TestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp ? tmp : "/tmp";
}

// Runs ParseFlags on `args` in a child process with stdout sent to `out`; the child exits 0 after the help,
// or 3 if ParseFlags returned.
void ParseInChild(std::vector<std::string> args, const std::string& out) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  if (std::freopen(out.c_str(), "w", stdout) == nullptr) std::exit(4);
  ParseFlags(static_cast<int>(argv.size()) - 1, argv.data());
  std::exit(3);
}

class FlagsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { absl::SetProgramUsageMessage("Counts widgets."); }
};

TEST_F(FlagsTest, HelpListsTheProgramsFlagsWithDefaults) {
  const std::string help = FlagsHelp("/some/where/widget_tool");
  EXPECT_EQ(help.rfind("widget_tool: Counts widgets.\n", 0), 0u) << help;
  EXPECT_NE(help.find("  Flags from base/flags_test.cc:\n"), std::string::npos) << help;
  EXPECT_NE(help.find("    --widgets (how many widgets); default: 3\n"), std::string::npos) << help;
  EXPECT_NE(help.find("    --label (what to call them); default: \"plain\"\n"), std::string::npos) << help;
  EXPECT_NE(help.find("    --tags (tags to add); default: (none)\n"), std::string::npos) << help;
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
  const std::string out = TestDir() + "/positional.txt";
  EXPECT_EXIT(ParseInChild({"widget_tool", "--", "--help"}, out), ::testing::ExitedWithCode(3), "");
  EXPECT_EQ(ReadFile(out).value_or(""), "");
}

TEST_F(FlagsTest, HelpAsTheValueOfAFlagIsThatValue) {
  // "--label --help": Abseil reads "--help" as the label, so it is no request for help. In a child, since
  // help would exit the process: 3 where ParseFlags returned with that label and the positional argument.
  const auto parse = [] {
    std::vector<std::string> args = {"widget_tool", "--label", "--help", "file.txt"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    const std::vector<char*> positional = ParseFlags(static_cast<int>(argv.size()), argv.data());
    const bool as_value = positional.size() == 2 && std::string(positional[1]) == "file.txt" &&
                          absl::GetFlag(FLAGS_label) == "--help";
    std::exit(as_value ? 3 : 5);
  };
  EXPECT_EXIT(parse(), ::testing::ExitedWithCode(3), "");
  // An int flag: Abseil rejects "-help" as its value (exit 1 with its message), and no help is printed.
  const std::string out = TestDir() + "/value.txt";
  EXPECT_EXIT(ParseInChild({"widget_tool", "-widgets", "-help"}, out), ::testing::ExitedWithCode(1),
              "widgets");
  EXPECT_EQ(ReadFile(out).value_or(""), "");
}

TEST_F(FlagsTest, HelpAfterABooleanFlagOrAnEqualsValueIsHelp) {
  for (const char* flag : {"--verbose_widgets", "--label=x", "--nonexistent_flag"}) {
    const std::string out = TestDir() + "/after.txt";
    std::remove(out.c_str());
    EXPECT_EXIT(ParseInChild({"widget_tool", flag, "--help"}, out), ::testing::ExitedWithCode(0), "") << flag;
    EXPECT_EQ(ReadFile(out).value_or(""), FlagsHelp("widget_tool")) << flag;
  }
}

TEST_F(FlagsTest, OtherArgumentsAreParsedByAbseil) {
  std::vector<std::string> args = {"widget_tool", "--widgets=7", "--label", "shiny", "file.txt"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  const std::vector<char*> positional = ParseFlags(static_cast<int>(argv.size()), argv.data());
  ASSERT_EQ(positional.size(), 2u);
  EXPECT_STREQ(positional[1], "file.txt");
  EXPECT_EQ(absl::GetFlag(FLAGS_widgets), 7);
  EXPECT_EQ(absl::GetFlag(FLAGS_label), "shiny");
}

}  // namespace
}  // namespace lmf
