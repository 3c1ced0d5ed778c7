// ThreadPool: every index is visited exactly once, chunks respect min_chunk, the pool is reusable, and its
// workers block the asynchronous signals.
#include "base/thread_pool.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace lmf {
namespace {

TEST(ThreadPool, ParallelForVisitsEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, 3, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, ChunksAreAtLeastMinChunkExceptTheLast) {
  ThreadPool pool(3);
  std::atomic<int> small_chunks{0};
  pool.ParallelFor(1000, 100, [&](int64_t b, int64_t e) {
    if (e - b < 100 && e != 1000) small_chunks.fetch_add(1);
  });
  EXPECT_EQ(small_chunks.load(), 0);
}

TEST(ThreadPool, RunTasksUsesSeveralThreadsAndIsReusable) {
  ThreadPool pool(2);
  EXPECT_EQ(pool.num_threads(), 2);
  for (int round = 0; round < 50; ++round) {
    std::atomic<int64_t> sum{0};
    pool.RunTasks(100, [&](int64_t i) { sum.fetch_add(i); });
    ASSERT_EQ(sum.load(), 4950);
  }
}

// Jobs spaced wider than the spin (workers asleep on the condition variable) and a worker's task longer
// than it (the caller asleep until that task ends) take the sleeping paths; back-to-back jobs the spinning
// ones. In the slow rounds the caller's own tasks wait until a worker has started one (at most 1 s), and a
// worker's tasks last 3 ms, so the caller is sure to wait for a worker past the spin.
TEST(ThreadPool, JobsFinishWhetherTheThreadsSpinOrSleep) {
  ThreadPool pool(3);
  const std::thread::id caller = std::this_thread::get_id();
  for (int round = 0; round < 20; ++round) {
    const bool slow = round % 2 == 1;
    std::atomic<int64_t> sum{0};
    std::atomic<bool> worker_started{false};
    pool.RunTasks(6, [&](int64_t i) {
      if (slow && std::this_thread::get_id() == caller) {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (!worker_started.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      } else if (slow) {
        worker_started.store(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
      }
      sum.fetch_add(i);
    });
    ASSERT_EQ(sum.load(), 15) << "round " << round;
    if (round % 4 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
}

TEST(ThreadPool, SingleThreadPoolRunsInline) {
  ThreadPool pool(1);
  int64_t sum = 0;  // no atomics needed: everything runs on the caller
  pool.ParallelFor(10, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum, 45);
}

}  // namespace
}  // namespace lmf

namespace lmf {
namespace {

TEST(ThreadPool, WorkersBlockAsynchronousSignalsAndTheCallerKeepsItsMask) {
  sigset_t before;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &before), 0);
  ASSERT_EQ(sigismember(&before, SIGTERM), 0) << "the test expects the main thread to start with SIGTERM open";
  ThreadPool pool(3);
  std::mutex mu;
  std::set<std::thread::id> workers_seen;
  bool all_blocked = true;
  const std::thread::id caller = std::this_thread::get_id();
  // Enough slow tasks that the workers take some of them.
  pool.RunTasks(64, [&](int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (std::this_thread::get_id() == caller) return;
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    std::lock_guard<std::mutex> lock(mu);
    workers_seen.insert(std::this_thread::get_id());
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM}) {
      all_blocked = all_blocked && sigismember(&mask, sig) == 1;
    }
  });
  EXPECT_FALSE(workers_seen.empty());
  EXPECT_TRUE(all_blocked);
  sigset_t after;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &after), 0);
  EXPECT_EQ(sigismember(&after, SIGTERM), 0);  // the pool's constructor restored the caller's mask
}

}  // namespace
}  // namespace lmf
