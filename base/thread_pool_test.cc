// ThreadPool: every index is visited exactly once, chunks respect min_chunk, and the pool is reusable.
#include "base/thread_pool.h"

#include <atomic>
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
