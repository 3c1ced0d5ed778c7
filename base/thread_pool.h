// A fixed pool of worker threads with a blocking ParallelFor, shared by the CPU kernels, the tokenizer
// and the data loaders. The calling thread takes part in the work, so a pool of N threads runs N-way
// parallel work with N-1 workers. Between jobs a worker spins (sched_yield) for a short while (kSpin)
// before it sleeps, and the caller spins as long for the workers' last tasks: a training step runs
// hundreds of short jobs back to back, and a futex wake-up per job cost more than many of those jobs'
// work. Workers block the asynchronous signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2, SIGALRM):
// they are handled on the caller's threads, never inside a kernel on a worker.
//
//   lmf::ThreadPool pool(4);
//   pool.ParallelFor(n, /*min_chunk=*/1024, [&](int64_t begin, int64_t end) { ... });
#ifndef LMFORGE_BASE_THREAD_POOL_H_
#define LMFORGE_BASE_THREAD_POOL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lmf {

class ThreadPool {
 public:
  // The most threads a pool takes (flags check against it; more is an invariant failure).
  static constexpr int kMaxThreads = 1024;
  // num_threads <= 0 means one per hardware thread (std::thread::hardware_concurrency()).
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that work on a ParallelFor, the caller included.
  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Splits [0, n) into contiguous chunks of at least min_chunk items (the last may be smaller) and runs
  // fn(begin, end) on each, the chunks spread over the pool; returns when all are done. Runs inline when
  // one chunk covers everything. Not reentrant: fn must not call ParallelFor on the same pool; and one
  // caller at a time: two threads must not run jobs on one pool at once.
  void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

  // Runs fn(i) for i in [0, tasks) with one task at a time per thread (dynamic scheduling), for work of
  // uneven size. Same rules as ParallelFor.
  void RunTasks(int64_t tasks, const std::function<void(int64_t)>& fn);

  // A process-wide pool sized by LMF_NUM_THREADS, else the hardware thread count.
  static ThreadPool& Default();

 private:
  // How long a worker spins for the next job, and the caller for the workers' tasks, before sleeping.
  static constexpr std::chrono::microseconds kSpin{50};

  void WorkerLoop();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // Written under mu_; generation_ and tasks_done_ are also read without it by the spinning threads.
  const std::function<void(int64_t)>* task_ = nullptr;  // the job being run, or null
  int64_t num_tasks_ = 0;
  int64_t next_task_ = 0;
  std::atomic<int64_t> tasks_done_{0};
  std::atomic<uint64_t> generation_{0};
  int sleeping_workers_ = 0;    // workers waiting on work_cv_
  bool caller_sleeping_ = false;  // the caller waits on done_cv_
  bool stop_ = false;
};

}  // namespace lmf

#endif  // LMFORGE_BASE_THREAD_POOL_H_
