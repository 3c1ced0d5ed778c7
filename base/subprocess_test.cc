// RunCommand: stdout and stderr apart, the exit status, a command past its timeout killed, a missing one
// named.
#include "base/subprocess.h"

#include <chrono>

#include "gtest/gtest.h"

namespace lmf {
namespace {

TEST(RunCommand, CapturesStdoutAndStderrApartWithTheExitCode) {
  auto output = RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"}, 30);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(output->out, "out\n");
  EXPECT_EQ(output->err, "err\n");
  EXPECT_EQ(output->exit_code, 3);
}

TEST(RunCommand, ACommandPastItsTimeoutIsKilled) {
  const auto start = std::chrono::steady_clock::now();
  auto output = RunCommand({"sleep", "30"}, 0.5);
  EXPECT_TRUE(absl::IsDeadlineExceeded(output.status())) << output.status();
  EXPECT_NE(output.status().message().find("sleep 30"), std::string::npos) << output.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(RunCommand, AMissingCommandIsNotFound) {
  auto output = RunCommand({"lmf-no-such-command"}, 30);
  EXPECT_TRUE(absl::IsNotFound(output.status())) << output.status();
  EXPECT_NE(output.status().message().find("lmf-no-such-command"), std::string::npos) << output.status();
}

TEST(RunCommand, ASignalledCommandReports128PlusTheSignal) {
  auto output = RunCommand({"sh", "-c", "kill -9 $$"}, 30);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(output->exit_code, 128 + 9);
}

}  // namespace
}  // namespace lmf
