// Tests for bazel/gtest_main.cc, run by premature_exit_test.sh: death tests of both styles still pass, and
// with PREMATURE_EXIT set a test that calls exit(0) makes the binary fail.
#include <cstdio>
#include <cstdlib>

#include "gtest/gtest.h"

namespace {

TEST(PrematureExit, FastDeathTestMayExitZero) {
  GTEST_FLAG_SET(death_test_style, "fast");
  EXPECT_EXIT(std::exit(0), ::testing::ExitedWithCode(0), "");
}

TEST(PrematureExit, ThreadsafeDeathTestMayExitZero) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(0), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(std::exit(7), ::testing::ExitedWithCode(7), "");
}

TEST(PrematureExit, ExitsWhereAsked) {
  if (std::getenv("PREMATURE_EXIT") != nullptr) std::exit(0);
}

TEST(PrematureExit, RunsLast) { std::puts("the last test ran"); }

}  // namespace
