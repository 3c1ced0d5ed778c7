// ThreadPool: workers wait for a job (a task count and a function), claim task indices under the lock
// until none is left, and the caller waits until every claimed task has finished. Both wait by spinning
// for up to kSpin first (no lock held), then on a condition variable; a job is announced by a new
// generation_, and the condition variables are notified only when someone sleeps on them.
#include "base/thread_pool.h"

#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/check.h"

namespace lmf {
namespace {

// Spins until done() or `spin` has passed; returns done(). It spins by sched_yield, not a pause loop: on
// a shared machine a thread that is ready on this core runs instead. Measured with the quickstart's
// largest model on 2 threads (2 cores): pause-spinning was as fast as this alone, but two such trainings
// side by side ran 17% slower than with plain sleeping; yielding ran them no slower than sleeping.
template <typename Done>
bool SpinUntil(std::chrono::microseconds spin, const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + spin;
  while (!done()) {
    sched_yield();
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
  return true;
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) {
    num_threads =
        static_cast<int>(std::min<unsigned>(std::max(1u, std::thread::hardware_concurrency()), kMaxThreads));
  }
  LMF_CHECK_LE(num_threads, kMaxThreads) << "threads in one pool";
  workers_.reserve(num_threads - 1);
  // Workers start with the asynchronous signals blocked (a thread inherits its creator's mask), so a
  // process-directed signal is never handled on a worker in the middle of a kernel. This matters beyond
  // tidiness: Debian's oneDNN (2.6) points rsp into a heap workspace inside its JIT GEMM kernels, so a
  // signal frame pushed there corrupts the heap (oneDNN issue #4845, fixed upstream in 2026).
  sigset_t async_signals, previous;
  sigemptyset(&async_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM}) sigaddset(&async_signals, sig);
  pthread_sigmask(SIG_BLOCK, &async_signals, &previous);
  for (int i = 0; i + 1 < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);  // ends the workers' spinning
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    SpinUntil(kSpin, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    std::unique_lock<std::mutex> lock(mu_);
    if (!stop_ && generation_.load(std::memory_order_relaxed) == seen) {
      ++sleeping_workers_;
      work_cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      --sleeping_workers_;
    }
    if (stop_) return;
    seen = generation_.load(std::memory_order_relaxed);
    while (task_ != nullptr && next_task_ < num_tasks_) {
      const int64_t i = next_task_++;
      const auto* fn = task_;
      lock.unlock();
      (*fn)(i);
      lock.lock();
      if (tasks_done_.fetch_add(1) + 1 == num_tasks_ && caller_sleeping_) done_cv_.notify_all();
    }
  }
}

void ThreadPool::RunTasks(int64_t tasks, const std::function<void(int64_t)>& fn) {
  if (tasks <= 0) return;
  if (tasks == 1 || workers_.empty()) {
    for (int64_t i = 0; i < tasks; ++i) fn(i);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  task_ = &fn;
  num_tasks_ = tasks;
  next_task_ = 0;
  tasks_done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  if (sleeping_workers_ > 0) work_cv_.notify_all();
  while (next_task_ < num_tasks_) {
    const int64_t i = next_task_++;
    lock.unlock();
    fn(i);
    lock.lock();
    tasks_done_.fetch_add(1);
  }
  if (tasks_done_.load() != tasks) {
    lock.unlock();
    const bool done = SpinUntil(kSpin, [&] { return tasks_done_.load(std::memory_order_acquire) == tasks; });
    lock.lock();
    if (!done) {
      caller_sleeping_ = true;
      done_cv_.wait(lock, [&] { return tasks_done_.load(std::memory_order_relaxed) == tasks; });
      caller_sleeping_ = false;
    }
  }
  task_ = nullptr;
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t max_chunks = (n + min_chunk - 1) / min_chunk;
  // A few chunks per thread balance uneven cores without paying much per chunk.
  const int64_t chunks = std::min<int64_t>(max_chunks, 4 * static_cast<int64_t>(num_threads()));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  const int64_t step = (n + chunks - 1) / chunks;
  RunTasks((n + step - 1) / step, [&](int64_t c) { fn(c * step, std::min(n, (c + 1) * step)); });
}

ThreadPool& ThreadPool::Default() {
  static ThreadPool* pool = [] {
    int n = 0;
    if (const char* env = std::getenv("LMF_NUM_THREADS")) {
      char* end = nullptr;
      const long value = std::strtol(env, &end, 10);
      if (end == env || *end != '\0' || value < 0) {
        std::fprintf(stderr, "LMF_NUM_THREADS=%s is not a thread count; using one per hardware thread\n",
                     env);
      } else if (value > kMaxThreads) {
        std::fprintf(stderr, "LMF_NUM_THREADS=%s is above %d threads; using %d\n", env, kMaxThreads,
                     kMaxThreads);
        n = kMaxThreads;
      } else {
        n = static_cast<int>(value);
      }
    }
    return new ThreadPool(n);
  }();
  return *pool;
}

}  // namespace lmf
