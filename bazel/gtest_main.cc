// The main of every lmf_cc_test: GoogleTest's main, plus a failure where the process ends while the tests
// run. GoogleTest writes TEST_PREMATURE_EXIT_FILE for that case, but Bazel 4 does not read it: a test that
// called exit(0) (code under test that handles --help, say) passed, and the cases after it never ran.
// Here an exit during RUN_ALL_TESTS exits 1 instead, with a message on stderr.
//
// Death tests still end their own processes as they mean to: a "fast" death test's child is a fork (another
// pid), and a "threadsafe" one's is this binary run again with --gtest_internal_run_death_test.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

namespace {

std::atomic<bool> tests_running{false};
pid_t main_pid = 0;

void FailIfTestsWereRunning() {
  if (!tests_running.load() || ::getpid() != main_pid) return;
  static constexpr char kMessage[] =
      "\n*** The test process exited while its tests were running (exit() in the code under test?): "
      "the test that was running and every later one did not finish. Failing the run.\n";
  // write(2) and _exit: async-signal-safe, and nothing else of the half-finished run is flushed.
  const ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  static_cast<void>(ignored);
  ::_exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  bool death_test_child = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--gtest_internal_run_death_test", 31) == 0) death_test_child = true;
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (!death_test_child) {
    main_pid = ::getpid();
    std::atexit(FailIfTestsWereRunning);
    tests_running.store(true);
  }
  const int result = RUN_ALL_TESTS();
  tests_running.store(false);
  return result;
}
