// Command-line parsing of the experiment binaries: values, repeats, switches, and the flags a user can get
// wrong (an unknown name, a positional argument, a value-taking flag given bare).
#include "experiments/cli_args.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

absl::StatusOr<CliArgs> Parse(std::vector<std::string> flags,
                              const std::set<std::string>& switches = {"help"}) {
  std::vector<char*> argv = {const_cast<char*>("generate")};
  for (std::string& flag : flags) argv.push_back(flag.data());
  return CliArgs::Parse(static_cast<int>(argv.size()), argv.data(), {"prompt", "set", "resume", "help"},
                        switches);
}

TEST(CliArgs, ValuesRepeatsAndSwitches) {
  auto args =
      Parse({"--prompt=Once upon", "--set=a=1", "--set=b=2", "--resume", "--help"}, {"resume", "help"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->Get("prompt"), "Once upon");
  EXPECT_EQ(args->GetAll("set"), (std::vector<std::string>{"a=1", "b=2"}));
  EXPECT_TRUE(*args->GetBool("resume", false));
  EXPECT_TRUE(args->Has("help"));
  auto empty = Parse({"--prompt="});  // an empty value is a value
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->Get("prompt", "fallback"), "");
}

// `--prompt` alone used to be the prompt "true" (and eval's bare --tokens the file ./true).
TEST(CliArgs, AFlagThatTakesAValueNeedsOne) {
  EXPECT_EQ(Parse({"--prompt"}).status().message(), "--prompt needs a value: --prompt=VALUE");
  EXPECT_EQ(Parse({"--resume"}).status().message(),
            "--resume needs a value: --resume=VALUE");  // not a switch here
  EXPECT_TRUE(Parse({"--help"}).ok());                  // the default switch
  // The value put in the next argument, as some CLIs take it: the message shows the spelling meant.
  EXPECT_EQ(Parse({"--set", "run.seed=3"}).status().message(),
            "--set needs a value: --set=VALUE in one argument (--set=run.seed=3), not --set run.seed=3");
}

TEST(CliArgs, UnknownFlagsAndPositionalArgumentsAreRefused) {
  EXPECT_EQ(Parse({"--promt=x"}).status().message(),
            "unknown flag --promt; known: --help, --prompt, --resume, --set");
  EXPECT_EQ(Parse({"story.txt"}).status().message(),
            "unexpected argument \"story.txt\" (flags are --name=value)");
}

// --help beside a full command prints the usage (on stdout) and asks the binary to run nothing; a command
// that did not parse is a usage error even with --help.
TEST(CliArgs, PrintHelpIfAsked) {
  ::testing::internal::CaptureStdout();
  EXPECT_TRUE(PrintHelpIfAsked(Parse({"--prompt=Once upon", "--help"}), "usage: generate\n"));
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "usage: generate\n");
  ::testing::internal::CaptureStdout();
  EXPECT_FALSE(PrintHelpIfAsked(Parse({"--prompt=Once upon"}), "usage: generate\n"));
  EXPECT_FALSE(PrintHelpIfAsked(Parse({"--prompt", "--help"}), "usage: generate\n"));
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
}

}  // namespace
}  // namespace lmf::experiments
