// StopSignals: a SIGTERM or SIGINT inside the scope is recorded (not fatal) and taken by the watcher thread
// while the constructing thread blocks both; the mask and the handlers come back afterwards; disabled, it
// changes nothing.
#include "experiments/trainer/stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

bool Blocked(int sig) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, sig) == 1;
}

int WaitForSignal(const StopSignals& signals) {
  for (int i = 0; i < 2000 && signals.received() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return signals.received();
}

TEST(StopSignals, SigtermIsRecordedByTheWatcherWhileThisThreadBlocksIt) {
  ASSERT_FALSE(Blocked(SIGTERM));
  {
    const StopSignals signals(true);
    EXPECT_TRUE(Blocked(SIGTERM));
    EXPECT_TRUE(Blocked(SIGINT));
    EXPECT_EQ(signals.received(), 0);
    ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);  // process-directed, as from `kill` or a job scheduler
    EXPECT_EQ(WaitForSignal(signals), SIGTERM);
  }
  EXPECT_FALSE(Blocked(SIGTERM));
  struct sigaction now = {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);  // the disposition before the scope
}

TEST(StopSignals, SigintIsRecordedAndANewScopeStartsClear) {
  {
    const StopSignals signals(true);
    ASSERT_EQ(::kill(::getpid(), SIGINT), 0);
    EXPECT_EQ(WaitForSignal(signals), SIGINT);
  }
  const StopSignals next(true);
  EXPECT_EQ(next.received(), 0);  // the previous run's signal is not this run's
}

TEST(StopSignals, DisabledChangesNothing) {
  const StopSignals signals(false);
  EXPECT_FALSE(Blocked(SIGTERM));
  struct sigaction now = {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
  EXPECT_EQ(signals.received(), 0);
}

TEST(StopSignalsDeathTest, ASecondSignalEndsTheProcess) {
  EXPECT_EXIT(
      {
        const StopSignals signals(true);
        ::kill(::getpid(), SIGTERM);
        WaitForSignal(signals);
        ::kill(::getpid(), SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(5));
        std::_Exit(0);  // not reached when the second signal ends the process
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

// A thread started before the scope keeps both signals open (as the CUDA driver's threads do, started when
// the device is opened), so the kernel may hand it a process-directed signal and the flag-only handler runs
// there. The first signal is recorded; a second must still end the process.
TEST(StopSignalsDeathTest, ASecondSignalOnAThreadThatLeavesThemOpenEndsTheProcess) {
  EXPECT_EXIT(
      {
        std::atomic<bool> done{false};
        std::thread open_thread([&done] {
          while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        });
        const StopSignals signals(true);
        ::pthread_kill(open_thread.native_handle(), SIGTERM);
        if (WaitForSignal(signals) != SIGTERM) std::_Exit(1);  // the first one is only recorded
        ::pthread_kill(open_thread.native_handle(), SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(5));
        done.store(true);
        open_thread.join();
        std::_Exit(0);  // not reached when the second signal ends the process
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

}  // namespace
}  // namespace lmf::experiments
